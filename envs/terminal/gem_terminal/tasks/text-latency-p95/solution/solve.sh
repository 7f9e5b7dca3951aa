#!/bin/bash
set -e
cat > /app/latency.sh <<'SH'
#!/bin/bash
# Per path: request count and nearest-rank p95 of the response time (last field); 5xx and malformed lines skipped.
LC_ALL=C awk '
  match($0, /^[^ ]+ [^ ]+ [^ ]+ \[[^]]+\] "[A-Z]+ [^ ]+ [^"]+" [0-9]+ [0-9-]+ [0-9]+$/) {
    split($0, quoted, "\"")
    split(quoted[2], request, " ")
    path = request[2]
    sub(/\?.*/, "", path)
    n = split(quoted[3], tail, " ")
    if (tail[1] + 0 >= 500) next
    print path, tail[n]
  }' | LC_ALL=C sort -k1,1 -k2,2n | LC_ALL=C awk '
  function flush() { if (count) print current, count, times[int((95 * count + 99) / 100)] }
  $1 != current { flush(); current = $1; count = 0 }
  { times[++count] = $2 }
  END { flush() }'
SH
chmod +x /app/latency.sh
