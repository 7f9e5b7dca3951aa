#!/bin/bash
set -e
cd /app/projects/atlas
find . -type d -exec chmod 2775 {} +
find . -type f -exec chmod 664 {} +
chmod 775 bin/*.sh
