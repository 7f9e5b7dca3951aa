#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
test -z "$(ls notes | grep '\.txt$' || true)"
for n in monday tuesday wednesday; do grep -qx "note for $n" notes/$n.md; done
