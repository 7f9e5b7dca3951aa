#include <stdio.h>
#include <stdlib.h>

#include "config.h"
#include "util.h"

int main(int argc, char **argv) {
    long x = argc > 1 ? atol(argv[1]) : 0;
    printf("%ld\n", shift(x * SCALE));
    return 0;
}
