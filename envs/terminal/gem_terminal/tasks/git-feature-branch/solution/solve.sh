#!/bin/bash
set -e
cd /app/repo && git checkout -qb feature && echo 'new feature' > FEATURE.md && git add FEATURE.md && git commit -qm 'add feature'
