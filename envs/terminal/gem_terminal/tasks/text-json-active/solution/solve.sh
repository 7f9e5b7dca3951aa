#!/bin/bash
set -e
python3 -c "import json; [print(u['name']) for u in json.load(open('/app/users.json')) if u['active']]" > /app/active.txt
