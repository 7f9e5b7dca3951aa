#!/bin/bash
set -e
cat > /app/render.sh <<'SH'
#!/bin/bash
# Replace {{ KEY }} in $1 by KEY's literal value from $2 (KEY=VALUE lines); unknown keys stay.
exec python3 -I - "$@" <<'PY'
import re
import sys

template, variables = sys.argv[1:3]
values = {}
for line in open(variables, encoding="utf-8").read().splitlines():
    if line.strip() and not line.startswith("#") and "=" in line:
        key, value = line.split("=", 1)
        values[key] = value
text = open(template, encoding="utf-8").read()
sys.stdout.write(re.sub(r"\{\{ *(\w+) *\}\}", lambda m: values.get(m.group(1), m.group(0)), text))
PY
SH
chmod +x /app/render.sh
