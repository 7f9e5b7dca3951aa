#!/bin/bash
# Exit 0 when the task is solved. The worker was watched by the probe (tests/gem-probe.sh) while the agent's
# processes ran: it was alive and the log grew.
set -e
test "$(sed -n 3p /tests/gem-probe.out)" = '[exit code] 0'
before=$(sed -n 1p /tests/gem-probe.out)
after=$(sed -n 2p /tests/gem-probe.out)
test "$after" -gt "$before"
