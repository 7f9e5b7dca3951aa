#include "parts.h"

int answer(void) { return 42; }
