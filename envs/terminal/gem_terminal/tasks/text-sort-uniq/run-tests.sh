#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
printf 'alice\nbob\ncarol\ndave\n' | diff - unique.txt
