#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
test "$(python3 calc.py 2 3)" = 5
test "$(python3 calc.py 10 -4)" = 6
