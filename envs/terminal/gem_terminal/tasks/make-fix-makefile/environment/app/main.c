#include <stdio.h>
int add(int, int);
int main(void) { printf("sum=%d\n", add(3, 4)); return 0; }
