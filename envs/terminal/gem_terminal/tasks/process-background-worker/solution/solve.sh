#!/bin/bash
set -e
cd /app && nohup bash -c 'while true; do date >> /app/heartbeat.log; sleep 1; done' >/dev/null 2>&1 &
echo $! > /app/worker.pid
sleep 1.5
