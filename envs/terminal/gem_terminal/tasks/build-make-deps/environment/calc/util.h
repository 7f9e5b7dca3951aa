#define OFFSET 7
long shift(long x);
