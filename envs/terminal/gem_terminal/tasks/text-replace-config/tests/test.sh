#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
set -e
echo 0 > /logs/verifier/reward.txt
cd /app
if grep -rq localhost --include='*.conf' config; then exit 1; fi  # not `! cmd`: set -e ignores a negated command
grep -q 'host=db.internal' config/app.conf
grep -q 'db.internal:5432' config/sub/db.conf
grep -q localhost config/notes.txt
echo 1 > /logs/verifier/reward.txt
