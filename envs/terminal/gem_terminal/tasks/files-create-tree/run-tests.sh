#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
for d in src docs tests; do test -d project/$d; done
test "$(head -n1 project/README.md)" = '# Project'
