#include <stdio.h>

#include "parts.h"

int main(void) {
    printf("%d\n", answer());
    return 0;
}
