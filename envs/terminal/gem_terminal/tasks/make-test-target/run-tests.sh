#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
make -s test
grep -q '^test:' Makefile
python3 -c 'import sys; sys.path.insert(0, "."); import util; assert util.reverse("abc") == "cba"'
