#!/bin/bash
set -e
cd /app/svc
# the port had a space in it, the files root a typo, and the log lived where this user cannot write
cat > server.ini <<'INI'
[server]
host = 127.0.0.1
port = 8090
greeting = welcome
log = /app/svc/server.log

[files]
root = /app/svc/www
INI
nohup python3 /app/svc/server.py > /app/svc/nohup.log 2>&1 &
for _ in $(seq 200); do curl -sf http://127.0.0.1:8090/status >/dev/null && break; sleep 0.05; done
curl -sf http://127.0.0.1:8090/status
