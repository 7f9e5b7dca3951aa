#!/bin/bash
# Exit 0 when the task is solved. Judged on committed objects only (the branches' trees).
set -e
cd /app/repo
test "$(git cat-file -p feature:FEATURE.md)" = 'new feature'
if git cat-file -e main:FEATURE.md 2>/dev/null; then exit 1; fi  # not `! cmd`: set -e ignores a negated command
test "$(git rev-list --count main)" = 1
git merge-base --is-ancestor main feature
