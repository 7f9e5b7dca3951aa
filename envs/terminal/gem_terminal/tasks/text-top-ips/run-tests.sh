#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
printf '10.0.0.2\n10.0.0.1\n' | diff - top.txt
