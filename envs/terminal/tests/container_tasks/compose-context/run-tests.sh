#!/bin/bash
# Built by the agent from the compose build context's files (src/, Makefile), with the image's gcc.
set -e
cd /app
test -x /app/greet
test "$(/app/greet)" = "hello, container"
rm -f greet && make -s && test "$(./greet)" = "hello, container"
grep -q 'printf("hello, container\\n");' src/greet.c
echo CHECKED
