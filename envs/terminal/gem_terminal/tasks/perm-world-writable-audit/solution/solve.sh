#!/bin/bash
set -e
cd /app/www
find . -mindepth 1 -perm -o+w -printf '%P\n' | LC_ALL=C sort > /app/world_writable.txt
find . -mindepth 1 -perm -o+w -exec chmod o-w {} +
