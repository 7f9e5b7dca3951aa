#!/bin/bash
set -e
cd /app/repo && (git merge other -q || true) && echo 'hello world' > greeting.txt && git add greeting.txt && git commit -qm 'merge other'
