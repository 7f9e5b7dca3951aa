#!/bin/bash
set -e
cd /app/rms
# the header defines the global (one definition per file that includes it): declare it, define it once
sed -i 's/^int samples = 0;$/extern int samples;/' include/mathx.h
sed -i 's/^#include "mathx.h"$/#include "mathx.h"\n\nint samples = 0;/' src/mathx.c
# the include folder and the math library were missing
sed -i 's|\$(CC) \$(CFLAGS) -o bin/rms src/main.c src/mathx.c|$(CC) $(CFLAGS) -Iinclude -o bin/rms src/main.c src/mathx.c -lm|' Makefile
make -s
