#!/bin/bash
set -e
cd /app/lib
IFS=. read -r major minor patch < VERSION
new="$major.$((minor + 1)).0"
echo "$new" > VERSION
python3 - "$new" <<'PY'
import sys
text = open("CHANGELOG.md").read()
open("CHANGELOG.md", "w").write(text.replace("## Unreleased\n", f"## Unreleased\n\n## {sys.argv[1]}\n", 1))
PY
git commit -qam "Release $new"
git tag -a "v$new" -m "Release $new"
