#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
! grep -rq localhost --include='*.conf' config
grep -q 'host=db.internal' config/app.conf
grep -q 'db.internal:5432' config/sub/db.conf
grep -q localhost config/notes.txt
