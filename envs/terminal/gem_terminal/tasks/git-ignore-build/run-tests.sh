#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
cd proj
test -z "$(git status --porcelain)"
git ls-files | grep -qx .gitignore
if git ls-files | grep -q '\.o$'; then exit 1; fi  # not `! cmd`: set -e ignores a negated command
