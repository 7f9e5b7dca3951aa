#!/bin/bash
set -e
cd /app/deploy/ssh
chmod 600 id_ed25519 id_ed25519.bak authorized_keys config
chmod 644 id_ed25519.pub known_hosts
chmod 700 .
