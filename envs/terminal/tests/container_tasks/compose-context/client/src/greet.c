#include <stdio.h>

int main(void) {
    printf("hello, container\n")
    return 0;
}
