#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
set -e
echo 0 > /logs/verifier/reward.txt
cd /app
test -z "$(ls notes | grep '\.txt$' || true)"
for n in monday tuesday wednesday; do grep -qx "note for $n" notes/$n.md; done
echo 1 > /logs/verifier/reward.txt
