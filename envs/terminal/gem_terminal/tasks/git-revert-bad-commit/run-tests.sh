#!/bin/bash
# Exit 0 when the task is solved. Judged on committed objects only (HEAD's tree), never the agent's index,
# config or exclude files. The committed calc.py runs as the agent (as-agent), on numbers drawn now.
set -eo pipefail
cd /app/calc
test "$(git rev-list --count HEAD)" = 3
rm -rf /checker/work/clone
mkdir /checker/work/clone
git archive HEAD | tar -C /checker/work/clone -xf -
git -C /checker/work/clone init -q
git -C /checker/work/clone add -A
git -C /checker/work/clone commit -q --allow-empty -m committed
a=$((RANDOM % 1000 - 500))
b=$((RANDOM % 1000 - 500))
out=$(cd /checker/work/clone && as-agent python3 -I -c "import sys; sys.path.append('.'); import calc; print(calc.add($a, $b))")
test "$(echo "$out" | tail -n 1)" = $((a + b))
test "$(echo "$out" | head -n 1)" = 5
tar -C /app/calc --exclude=./.git -cf - . | tar -C /checker/work/clone -xf -
test -z "$(git -C /checker/work/clone status --porcelain --untracked-files=all)"
