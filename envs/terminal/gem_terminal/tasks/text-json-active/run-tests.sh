#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
printf 'ann\ncid\n' | diff - active.txt
