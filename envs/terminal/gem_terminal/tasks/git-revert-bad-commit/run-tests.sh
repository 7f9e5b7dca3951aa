#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
cd calc
test "$(python3 calc.py)" = 5
test "$(git rev-list --count HEAD)" = 3
test -z "$(git status --porcelain)"
