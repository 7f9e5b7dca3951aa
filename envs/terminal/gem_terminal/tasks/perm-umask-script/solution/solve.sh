#!/bin/bash
set -e
# the umask before anything is created: files 600, folders 700
sed -i 's/^set -e$/set -e\numask 077/' /app/bin/backup.sh
grep -qx 'umask 077' /app/bin/backup.sh
