#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
pid=$(cat worker.pid)
test -d /proc/$pid
before=$(wc -l < heartbeat.log)
sleep 1.5
after=$(wc -l < heartbeat.log)
test "$after" -gt "$before"
