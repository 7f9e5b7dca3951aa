#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
python3 -P -c "import urllib.request; body = urllib.request.urlopen('http://127.0.0.1:8080/index.html', timeout=5).read().decode(); assert 'welcome' in body, body"
