#!/bin/bash
# Back up a folder: backup.sh SRC DEST writes DEST/backup.tar.gz (SRC's contents) and DEST/backup.log.
set -e
src=$1
dest=$2
mkdir -p "$dest"
tar -C "$src" -czf "$dest/backup.tar.gz" .
echo "backed up $(find "$src" -type f | wc -l) files from $src" > "$dest/backup.log"
