#!/bin/bash
# The image's own tools and set-up (apt, pip, uv's installer, WORKDIR per line, heredocs), then the agent's output.
set -e
command -v jq > /dev/null
python3 -c "import tomli_w"
test "$(cat /srv/data/where)" = srv
test "$(readlink /usr/local/bin/uv)" = /root/.local/bin/uv && /usr/local/bin/uv --version > /dev/null
grep -q uv /srv/data/uvx-version
grep -qx "set-up ran in /app" /app/.setup-marker
grep -qx "Extract the name." /app/README.txt
test "$(cat /app/name.txt)" = "ada lovelace"
python3 -P - <<'PY'
import tomllib
with open("/app/config.toml", "rb") as f:
    data = tomllib.load(f)
assert data == {"owner": {"name": "ada lovelace"}}, data
print("CHECKED config.toml")
PY
