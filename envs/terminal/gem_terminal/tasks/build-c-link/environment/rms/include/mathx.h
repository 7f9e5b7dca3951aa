#ifndef MATHX_H
#define MATHX_H

int samples = 0;

double rms(const double *xs, int n);

#endif
