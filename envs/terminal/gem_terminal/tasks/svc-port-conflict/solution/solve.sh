#!/bin/bash
set -e
cd /app/svc
printf '[backend]\nport = 8083\n' > backend.ini
printf '[api]\nport = 8082\nbackend_url = http://127.0.0.1:8083\n' > api.ini
nohup python3 backend.py > backend.log 2>&1 &
nohup python3 api.py > api.log 2>&1 &
for _ in $(seq 200); do curl -sf 'http://127.0.0.1:8082/sum?a=1&b=2' >/dev/null && break; sleep 0.05; done
curl -sf 'http://127.0.0.1:8082/sum?a=1&b=2'
