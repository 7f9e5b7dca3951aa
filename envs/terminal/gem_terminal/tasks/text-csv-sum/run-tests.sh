#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
test "$(tr -d ' \n' < total.txt)" = 1234
