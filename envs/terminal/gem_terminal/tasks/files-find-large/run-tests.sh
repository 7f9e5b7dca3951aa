#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
printf 'b.bin\nd.log\n' | diff - large.txt
