#!/bin/bash
set -e
cd /app/mathlib
git bisect start main "$(git rev-list --max-parents=0 main)" >/dev/null
git bisect run python3 -B check.py >/dev/null 2>&1
bad=$(git rev-parse refs/bisect/bad)
git bisect reset main >/dev/null 2>&1
git tag first-bad "$bad"
git revert --no-edit "$bad"
