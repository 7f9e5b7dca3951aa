#!/bin/bash
set -e
cat > /app/ctl.sh <<'SH'
#!/bin/bash
# start | stop | status of python3 /app/worker.py, through the pidfile /app/run/worker.pid.
pidfile=/app/run/worker.pid

running() {  # the pidfile's pid, when it is a live /app/worker.py
  local pid
  pid=$(cat "$pidfile" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q '/app/worker.py' || return 1
  echo "$pid"
}

case "$1" in
  start)
    if pid=$(running); then echo "already running $pid"; exit 1; fi
    mkdir -p "$(dirname "$pidfile")"
    setsid nohup python3 /app/worker.py > /dev/null 2>&1 < /dev/null &
    echo $! > "$pidfile"
    echo "started $!"
    ;;
  stop)
    if ! pid=$(running); then rm -f "$pidfile"; echo "not running"; exit 1; fi
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    rm -f "$pidfile"
    echo "stopped $pid"
    ;;
  status)
    if pid=$(running); then echo "running $pid"; exit 0; fi
    echo "stopped"
    exit 3
    ;;
  *) echo "usage: ctl.sh start|stop|status" >&2; exit 2 ;;
esac
SH
chmod +x /app/ctl.sh
/app/ctl.sh start
