#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
cd repo
git show feature:FEATURE.md | grep -qx 'new feature'
if git show main:FEATURE.md >/dev/null 2>&1; then exit 1; fi  # not `! cmd`: set -e ignores a negated command
test "$(git rev-list --count main)" = 1
