#!/bin/bash
set -e
awk '{print $1}' /app/access.log | sort | uniq -c | sort -rn | head -n2 | awk '{print $2}' > /app/top.txt
