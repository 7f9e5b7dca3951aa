#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
if grep -rq localhost --include='*.conf' config; then exit 1; fi  # not `! cmd`: set -e ignores a negated command
grep -q 'host=db.internal' config/app.conf
grep -q 'db.internal:5432' config/sub/db.conf
grep -q localhost config/notes.txt
