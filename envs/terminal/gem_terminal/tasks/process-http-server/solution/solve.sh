#!/bin/bash
set -e
cd /app/site && nohup python3 -m http.server 8080 --bind 127.0.0.1 > /tmp/server.log 2>&1 &
sleep 1
