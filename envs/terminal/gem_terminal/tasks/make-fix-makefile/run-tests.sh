#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
make -s >/dev/null
test "$(./app)" = 'sum=7'
