#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# The agent's code runs as the agent (as-agent) on cases drawn now; this
# process (which never imports it) compares its answers with its own, so nothing the agent's code prints
# or patches passes without the right answers.
set -e
echo 0 > /logs/verifier/reward.txt
# gem runs the agent's programs through as-agent (as the agent's uid, in a child process); where there is
# none (Harbor), a stand-in on PATH runs them directly, for this script and the programs it starts alike.
command -v as-agent >/dev/null || { shim=$(mktemp -d) && printf '#!/bin/sh\nexec "$@"\n' > "$shim/as-agent" && chmod 755 "$shim/as-agent" && PATH="$shim:$PATH"; }
cd /app
python3 -I - <<'PY'
import json
import random
import subprocess
import sys

rng = random.SystemRandom()
cases = [([rng.randrange(100) for _ in range(rng.randrange(12))], rng.randrange(14)) for _ in range(30)]
cases += [([1, 2, 3, 4], 2), ([1, 2, 3], 3), ([1, 2], 0)]
program = (
    "import json, sys\nsys.path.append('/app')\nfrom lists import last_n\n"
    "for items, n in json.loads(sys.stdin.read()):\n    print(json.dumps(last_n(items, n)))\n"
)
run = subprocess.run(
    ["as-agent", "python3", "-I", "-c", program], input=json.dumps(cases), capture_output=True, text=True, timeout=30
)
want = [json.dumps(items[-n:] if n > 0 else []) for items, n in cases]
got = run.stdout.splitlines()
if run.returncode != 0 or got != want:
    print(run.stderr[-1000:], f"exit {run.returncode}; wanted {want[:3]}..., got {got[:3]}...")
    sys.exit(1)
PY
echo 1 > /logs/verifier/reward.txt
