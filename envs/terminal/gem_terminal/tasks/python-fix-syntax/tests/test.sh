#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# The agent's program runs as the agent (as-agent), on numbers drawn now.
set -e
echo 0 > /logs/verifier/reward.txt
# gem runs the agent's programs through as-agent (as the agent's uid, in a child process); where there is
# none (Harbor), a stand-in on PATH runs them directly, for this script and the programs it starts alike.
command -v as-agent >/dev/null || { shim=$(mktemp -d) && printf '#!/bin/sh\nexec "$@"\n' > "$shim/as-agent" && chmod 755 "$shim/as-agent" && PATH="$shim:$PATH"; }
cd /app
test "$(as-agent python3 calc.py 2 3)" = 5
a=$((RANDOM % 1000 - 500))
b=$((RANDOM % 1000 - 500))
test "$(as-agent python3 calc.py $a $b)" = $((a + b))
echo 1 > /logs/verifier/reward.txt
