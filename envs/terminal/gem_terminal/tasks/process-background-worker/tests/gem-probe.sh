# Probe: runs while the agent's processes still do (before they are killed and the checker runs).
set -e
pid=$(cat /app/worker.pid)
test -d /proc/$pid
wc -l < /app/heartbeat.log
sleep 1.5
wc -l < /app/heartbeat.log
