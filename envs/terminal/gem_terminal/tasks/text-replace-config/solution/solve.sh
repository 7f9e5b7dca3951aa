#!/bin/bash
set -e
find /app/config -name '*.conf' -exec sed -i 's/localhost/db.internal/g' {} +
