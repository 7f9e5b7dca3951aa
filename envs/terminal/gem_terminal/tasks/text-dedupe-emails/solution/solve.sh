#!/bin/bash
set -e
cat > /app/dedupe.sh <<'SH'
#!/bin/bash
# One row per email (trimmed, lowercased): the earliest signup, the first on a tie; sorted by email.
LC_ALL=C awk -F, '
  function trim(s) { gsub(/^[ \t]+|[ \t\r]+$/, "", s); return s }
  NR == 1 { print "name,email,signup"; next }
  /^[ \t\r]*$/ { next }
  {
    name = trim($1); email = tolower(trim($2)); signup = trim($3)
    if (!(email in best) || signup < best[email]) { best[email] = signup; row[email] = name "," email "," signup }
  }
  END { for (e in row) print row[e] | "LC_ALL=C sort -t, -k2,2" }'
SH
chmod +x /app/dedupe.sh
