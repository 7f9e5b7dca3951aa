#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# Modes are read, not tried: the checker is another uid than the owner.
set -e
echo 0 > /logs/verifier/reward.txt
cd /app
test "$(stat -c %A run.sh | cut -c4)" = x
test "$(stat -c %a secret.txt)" = 600
echo 1 > /logs/verifier/reward.txt
