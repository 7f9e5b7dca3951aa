#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# Judged on committed objects only (the branches' trees).
set -e
echo 0 > /logs/verifier/reward.txt
cd /app/repo
test "$(git cat-file -p feature:FEATURE.md)" = 'new feature'
if git cat-file -e main:FEATURE.md 2>/dev/null; then exit 1; fi  # not `! cmd`: set -e ignores a negated command
test "$(git rev-list --count main)" = 1
git merge-base --is-ancestor main feature
echo 1 > /logs/verifier/reward.txt
