#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# The tests stay untouched; the agent's code runs as the agent (as-agent)
# on carts drawn now, and this process (which never imports it) compares its totals with its own.
set -e
echo 0 > /logs/verifier/reward.txt
# gem runs the agent's programs through as-agent (as the agent's uid, in a child process); where there is
# none (Harbor), a stand-in on PATH runs them directly, for this script and the programs it starts alike.
command -v as-agent >/dev/null || { shim=$(mktemp -d) && printf '#!/bin/sh\nexec "$@"\n' > "$shim/as-agent" && chmod 755 "$shim/as-agent" && PATH="$shim:$PATH"; }
cmp /app/shop/tests/test_cart.py /tests/test_cart.py
cd /app/shop
python3 -I - <<'PY'
import json
import random
import subprocess
import sys

rng = random.SystemRandom()
cases = [([rng.randrange(1, 400) / 4 for _ in range(rng.randrange(6))], rng.choice([0.0, 0.1, 0.25, 0.5])) for _ in range(20)]
cases += [([1.0, 2.5], 0.0), ([10.0, 10.0], 0.25)]
program = (
    "import json, sys\nsys.path.append('/app/shop')\nfrom shop.cart import total_price\n"
    "for prices, discount in json.loads(sys.stdin.read()):\n    print(json.dumps(total_price(prices, discount=discount)))\n"
)
run = subprocess.run(
    ["as-agent", "python3", "-I", "-c", program], input=json.dumps(cases), capture_output=True, text=True, timeout=30
)
want = [round(sum(prices) * (1 - discount), 2) for prices, discount in cases]
try:
    got = [float(line) for line in run.stdout.splitlines()]
except ValueError:
    got = []
if run.returncode != 0 or len(got) != len(want) or any(abs(g - w) > 0.005 for g, w in zip(got, want)):
    print(run.stderr[-1000:], f"exit {run.returncode}; wanted {want[:3]}..., got {run.stdout[:200]!r}")
    sys.exit(1)
PY
echo 1 > /logs/verifier/reward.txt
