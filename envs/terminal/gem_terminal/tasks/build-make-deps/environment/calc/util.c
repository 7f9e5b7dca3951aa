#include "util.h"

long shift(long x) { return x + OFFSET; }
