#!/bin/bash
# Exit 0 when the task is solved. The server was fetched by the probe (tests/gem-probe.sh) while the agent's
# processes ran; now they are gone, and the checker compares what it served with the file.
set -e
cd /app
grep -q welcome site/index.html
test "$(sed -n 1p /tests/gem-probe.out)" = "$(sha256sum < site/index.html | cut -d' ' -f1)"
test "$(sed -n 2p /tests/gem-probe.out)" = '[exit code] 0'
