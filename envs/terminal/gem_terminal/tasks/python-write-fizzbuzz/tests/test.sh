#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# The agent's program runs as the agent (as-agent): it cannot read
# /tests/expected.txt (the checker's uid's alone), and a second count is drawn now.
set -eo pipefail
echo 0 > /logs/verifier/reward.txt
# gem runs the agent's programs through as-agent (as the agent's uid, in a child process); where there is
# none (Harbor), a stand-in on PATH runs them directly, for this script and the programs it starts alike.
command -v as-agent >/dev/null || { shim=$(mktemp -d) && printf '#!/bin/sh\nexec "$@"\n' > "$shim/as-agent" && chmod 755 "$shim/as-agent" && PATH="$shim:$PATH"; }
cd /app
as-agent python3 fizzbuzz.py 15 | diff - /tests/expected.txt
n=$((RANDOM % 50 + 16))
want=$(for ((i = 1; i <= n; i++)); do if ((i % 15 == 0)); then echo FizzBuzz; elif ((i % 3 == 0)); then echo Fizz; elif ((i % 5 == 0)); then echo Buzz; else echo $i; fi; done)
test "$(as-agent python3 fizzbuzz.py $n)" = "$want"
echo 1 > /logs/verifier/reward.txt
