#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
test -x run.sh
test "$(stat -c %a secret.txt)" = 600
