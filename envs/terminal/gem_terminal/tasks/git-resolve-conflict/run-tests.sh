#!/bin/bash
# Exit 0 when the task is solved. Judged on committed objects only (HEAD's tree), never the agent's index,
# config or exclude files: HEAD's tree in a fresh repository, with the work dir's files copied over it, must be clean.
set -eo pipefail
cd /app/repo
test "$(git cat-file -p HEAD:greeting.txt)" = 'hello world'
test "$(git symbolic-ref --short HEAD)" = main
git merge-base --is-ancestor other HEAD
rm -rf /checker/work/clone
mkdir /checker/work/clone
git archive HEAD | tar -C /checker/work/clone -xf -
git -C /checker/work/clone init -q
git -C /checker/work/clone add -A
git -C /checker/work/clone commit -q --allow-empty -m committed
tar -C /app/repo --exclude=./.git -cf - . | tar -C /checker/work/clone -xf -
test -z "$(git -C /checker/work/clone status --porcelain --untracked-files=all)"
