#include <stdio.h>
#include <stdlib.h>

#include "mathx.h"

int main(int argc, char **argv) {
    double xs[256];
    int n = 0;
    for (int i = 1; i < argc && n < 256; i++) xs[n++] = atof(argv[i]);
    printf("%.3f\n", rms(xs, n));
    fprintf(stderr, "samples: %d\n", samples);
    return 0;
}
