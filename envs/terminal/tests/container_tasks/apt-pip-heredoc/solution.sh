#!/bin/bash
jq -r .name /app/input.json > /app/name.txt
python3 - <<'PY'
import json, tomli_w
name = json.load(open("/app/input.json"))["name"]
open("/app/config.toml", "wb").write(tomli_w.dumps({"owner": {"name": name}}).encode())
PY
