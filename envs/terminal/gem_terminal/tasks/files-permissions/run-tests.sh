#!/bin/bash
# Exit 0 when the task is solved. Modes are read, not tried: the checker is another uid than the owner.
set -e
cd /app
test "$(stat -c %A run.sh | cut -c4)" = x
test "$(stat -c %a secret.txt)" = 600
