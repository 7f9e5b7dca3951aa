#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# The agent's code runs as the agent (as-agent), on a string drawn now;
# the checker compares what it printed.
set -eo pipefail
echo 0 > /logs/verifier/reward.txt
# gem runs the agent's programs through as-agent (as the agent's uid, in a child process); where there is
# none (Harbor), a stand-in on PATH runs them directly, for this script and the programs it starts alike.
command -v as-agent >/dev/null || { shim=$(mktemp -d) && printf '#!/bin/sh\nexec "$@"\n' > "$shim/as-agent" && chmod 755 "$shim/as-agent" && PATH="$shim:$PATH"; }
cd /app
as-agent make -s test >/dev/null
as-agent make -n test | grep -qx 'python3 test_util.py'
s=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
test -n "$s"
test "$(as-agent python3 -I -c 'import sys; sys.path.append("/app"); import util; print(util.reverse(sys.argv[1]))' "$s")" = "$(printf %s "$s" | rev)"
echo 1 > /logs/verifier/reward.txt
