#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# The server was fetched by the probe (tests/gem-probe.sh) while the agent's
# processes ran; now they are gone, and the checker compares what it served with the file.
set -e
echo 0 > /logs/verifier/reward.txt
# gem ran tests/gem-probe.sh while the agent's processes still ran (its output: /tests/gem-probe.out);
# under Harbor the verifier runs beside them, so the probe runs now.
probe=/tests/gem-probe.out
if [ ! -f "$probe" ]; then probe=$(mktemp) && (set +e; bash /tests/gem-probe.sh; echo "[exit code] $?") > "$probe"; fi
cd /app
grep -q welcome site/index.html
test "$(sed -n 1p "$probe")" = "$(sha256sum < site/index.html | cut -d' ' -f1)"
test "$(sed -n 2p "$probe")" = '[exit code] 0'
echo 1 > /logs/verifier/reward.txt
