#!/bin/bash
set -e
cd /app/release/v2.3
find . -type f -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' sha256sum > /app/release/CHECKSUMS
chmod 444 /app/release/CHECKSUMS
chmod -R a-w /app/release/v2.3
