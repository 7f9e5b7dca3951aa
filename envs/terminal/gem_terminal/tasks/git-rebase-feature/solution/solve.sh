#!/bin/bash
set -e
cd /app/web
git checkout -q feature
if ! git rebase main; then
  # the retries commit conflicts with main's timeout: keep both
  printf '"""A tiny HTTP client configuration."""\n\nHOST = "example.org"\nTIMEOUT = 30\nRETRIES = 3\n\n\ndef url(path):\n    return f"https://{HOST}/{path.lstrip('"'"'/'"'"')}"\n' > app.py
  git add app.py
  GIT_EDITOR=true git rebase --continue
fi
