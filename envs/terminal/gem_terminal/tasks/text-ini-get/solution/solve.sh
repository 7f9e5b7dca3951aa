#!/bin/bash
set -e
cat > /app/iniget.sh <<'SH'
#!/bin/bash
# The last value of key $3 in section [$2] of the INI file $1; exit 1 when there is none.
awk -v want_section="$2" -v want_key="$3" '
  function trim(s) { gsub(/^[ \t]+|[ \t\r]+$/, "", s); return s }
  { line = trim($0) }
  line ~ /^[;#]/ || line == "" { next }
  line ~ /^\[.*\]$/ { section = substr(line, 2, length(line) - 2); next }
  section == want_section && index(line, "=") {
    key = trim(substr(line, 1, index(line, "=") - 1))
    if (key == want_key) { value = trim(substr(line, index(line, "=") + 1)); found = 1 }
  }
  END { if (found) print value; exit !found }' "$1"
SH
chmod +x /app/iniget.sh
