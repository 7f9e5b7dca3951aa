#!/bin/bash
set -e
cat > /app/runjobs.sh <<'SH'
#!/bin/bash
# Run the due jobs of $1 (INTERVAL NAME COMMAND...), keeping last runs in $2, at time $3.
jobs=$1 state=$2 now=$3
declare -A last
if [ -f "$state" ]; then
  while read -r name when; do [ -n "$name" ] && last[$name]=$when; done < "$state"
fi
while read -r interval name command; do
  case "$interval" in ''|'#'*) continue ;; esac
  if [ -z "${last[$name]+set}" ] || [ $((now - ${last[$name]})) -ge "$interval" ]; then
    if bash -c "$command" </dev/null >&2; then echo "ran $name"; else echo "failed $name"; fi
    last[$name]=$now
  fi
done < "$jobs"
: > "$state.tmp"
for name in "${!last[@]}"; do echo "$name ${last[$name]}" >> "$state.tmp"; done
mv "$state.tmp" "$state"
SH
chmod +x /app/runjobs.sh
