#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
cd repo
git show feature:FEATURE.md | grep -qx 'new feature'
! git show main:FEATURE.md >/dev/null 2>&1
test "$(git rev-list --count main)" = 1
