#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
set -e
echo 0 > /logs/verifier/reward.txt
cd /app
printf 'alice\nbob\ncarol\ndave\n' | diff - unique.txt
echo 1 > /logs/verifier/reward.txt
