#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# The worker was watched by the probe (tests/gem-probe.sh) while the agent's
# processes ran: it was alive and the log grew.
set -e
echo 0 > /logs/verifier/reward.txt
# gem ran tests/gem-probe.sh while the agent's processes still ran (its output: /tests/gem-probe.out);
# under Harbor the verifier runs beside them, so the probe runs now.
probe=/tests/gem-probe.out
if [ ! -f "$probe" ]; then probe=$(mktemp) && (set +e; bash /tests/gem-probe.sh; echo "[exit code] $?") > "$probe"; fi
test "$(sed -n 3p "$probe")" = '[exit code] 0'
before=$(sed -n 1p "$probe")
after=$(sed -n 2p "$probe")
test "$after" -gt "$before"
echo 1 > /logs/verifier/reward.txt
