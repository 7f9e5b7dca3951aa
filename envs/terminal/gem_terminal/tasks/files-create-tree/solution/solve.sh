#!/bin/bash
set -e
mkdir -p /app/project/src /app/project/docs /app/project/tests
echo '# Project' > /app/project/README.md
