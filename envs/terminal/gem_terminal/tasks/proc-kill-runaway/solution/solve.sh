#!/bin/bash
set -e
bash /app/launch.sh
# the busy one is the worker whose CPU time (utime + stime, in clock ticks) runs away from the others'
for _ in $(seq 300); do
  busy=$(for pid in $(pgrep -f '/app/worker.py'); do
    awk -v pid="$pid" '{ print $14 + $15, pid }' "/proc/$pid/stat" 2>/dev/null
  done | sort -n | awk 'END { if ($1 >= 20) print $2 }')
  [ -n "$busy" ] && break
  sleep 0.05
done
kill "$busy"
