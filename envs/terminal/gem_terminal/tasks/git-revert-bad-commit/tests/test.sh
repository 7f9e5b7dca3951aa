#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# Judged on committed objects only (HEAD's tree), never the agent's index,
# config or exclude files. The committed calc.py runs as the agent (as-agent), on numbers drawn now.
set -eo pipefail
echo 0 > /logs/verifier/reward.txt
# gem runs the agent's programs through as-agent (as the agent's uid, in a child process); where there is
# none (Harbor), a stand-in on PATH runs them directly, for this script and the programs it starts alike.
command -v as-agent >/dev/null || { shim=$(mktemp -d) && printf '#!/bin/sh\nexec "$@"\n' > "$shim/as-agent" && chmod 755 "$shim/as-agent" && PATH="$shim:$PATH"; }
cd /app/calc
test "$(git rev-list --count HEAD)" = 3
# the checker's own copy, readable by as-agent (gem's agent uid)
clone=$(mktemp -d)
chmod 755 "$clone"
git archive HEAD | tar -C "$clone" -xf -
git -C "$clone" init -q
git -C "$clone" add -A
git -C "$clone" -c user.name=checker -c user.email=checker@localhost commit -q --allow-empty -m committed
a=$((RANDOM % 1000 - 500))
b=$((RANDOM % 1000 - 500))
out=$(cd "$clone" && as-agent python3 -I -B -c "import sys; sys.path.append('.'); import calc; print(calc.add($a, $b))")
test "$(echo "$out" | tail -n 1)" = $((a + b))
test "$(echo "$out" | head -n 1)" = 5
tar -C /app/calc --exclude=./.git -cf - . | tar -C "$clone" -xf -
test -z "$(git -C "$clone" status --porcelain --untracked-files=all)"
echo 1 > /logs/verifier/reward.txt
