#!/bin/bash
# Exit 0 when the task is solved. The marker must come last: code that exits early with status 0
# (os._exit(0) when imported) does not pass.
set -e
cd /app
out=$(python3 -P /tests/check_lists.py)
test "$(echo "$out" | tail -n 1)" = "last_n: all checks passed"
