#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# Judged on committed objects only (HEAD's tree), never the agent's index,
# config or exclude files: HEAD's tree in a fresh repository, with the work dir's files copied over it, must be clean.
set -eo pipefail
echo 0 > /logs/verifier/reward.txt
cd /app/repo
test "$(git cat-file -p HEAD:greeting.txt)" = 'hello world'
test "$(git symbolic-ref --short HEAD)" = main
git merge-base --is-ancestor other HEAD
# the checker's own copy, readable by as-agent (gem's agent uid)
clone=$(mktemp -d)
chmod 755 "$clone"
git archive HEAD | tar -C "$clone" -xf -
git -C "$clone" init -q
git -C "$clone" add -A
git -C "$clone" -c user.name=checker -c user.email=checker@localhost commit -q --allow-empty -m committed
tar -C /app/repo --exclude=./.git -cf - . | tar -C "$clone" -xf -
test -z "$(git -C "$clone" status --porcelain --untracked-files=all)"
echo 1 > /logs/verifier/reward.txt
