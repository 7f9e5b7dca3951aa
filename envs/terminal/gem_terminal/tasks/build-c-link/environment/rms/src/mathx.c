#include <math.h>

#include "mathx.h"

double rms(const double *xs, int n) {
    double sum = 0;
    for (int i = 0; i < n; i++) {
        sum += xs[i] * xs[i];
        samples++;
    }
    return n ? sqrt(sum / n) : 0;
}
