#!/bin/bash
set -e
cd /app/data && find . -maxdepth 1 -type f -size +1000c -printf '%f\n' | sort > /app/large.txt
