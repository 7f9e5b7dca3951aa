#!/bin/bash
set -e
chmod u+x /app/run.sh
chmod 600 /app/secret.txt
