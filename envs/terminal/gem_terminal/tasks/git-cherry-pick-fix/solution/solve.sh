#!/bin/bash
set -e
cd /app/parser
git checkout -q main
git cherry-pick "$(git log --format=%H --grep='^fix:' dev | head -n 1)"
