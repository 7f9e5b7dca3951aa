#!/bin/bash
set -e
cd /app/tools
find . -type d -exec chmod 755 {} +
find . -type f -print0 | while IFS= read -r -d '' f; do
    if [ "$(head -c 2 "$f")" = '#!' ]; then chmod 755 "$f"; else chmod 644 "$f"; fi
done
