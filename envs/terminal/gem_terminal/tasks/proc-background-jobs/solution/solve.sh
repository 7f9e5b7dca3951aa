#!/bin/bash
set -e
cat > /app/bg.sh <<'SH'
#!/bin/bash
# start NAME CMD...: run in the background (files in $JOBS_DIR); wait NAME [TIMEOUT]: its exit status.
dir=${JOBS_DIR:-/app/jobs}
mkdir -p "$dir"
action=$1 name=$2
shift 2
case "$action" in
  start)
    rm -f "$dir/$name.rc"
    (
      "$@" > "$dir/$name.out" 2> "$dir/$name.err" < /dev/null
      echo $? > "$dir/$name.rc.tmp" && mv "$dir/$name.rc.tmp" "$dir/$name.rc"
    ) > /dev/null 2>&1 &
    ;;
  wait)
    limit=$(( ${1:-10} * 20 ))
    for ((i = 0; i < limit; i++)); do
      if [ -f "$dir/$name.rc" ]; then
        status=$(cat "$dir/$name.rc")
        echo "$name exited $status"
        exit "$status"
      fi
      sleep 0.05
    done
    echo "$name running"
    exit 124
    ;;
  *) echo "usage: bg.sh start NAME CMD... | wait NAME [TIMEOUT]" >&2; exit 2 ;;
esac
SH
chmod +x /app/bg.sh
