#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# The agent's script runs as the agent (as-agent), with umask 000, on a folder drawn now; then what it wrote is read
# as its owner.
set -eo pipefail
echo 0 > /logs/verifier/reward.txt
# gem runs the agent's programs through as-agent (as the agent's uid, in a child process); where there is
# none (Harbor), a stand-in on PATH runs them directly, for this script and the programs it starts alike.
command -v as-agent >/dev/null || { shim=$(mktemp -d) && printf '#!/bin/sh\nexec "$@"\n' > "$shim/as-agent" && chmod 755 "$shim/as-agent" && PATH="$shim:$PATH"; }
# Private files are read as their owner: directly where the checker is root (a container, Harbor), else as the agent.
as_owner() { if [ "$(id -u)" = 0 ]; then "$@"; else as-agent "$@"; fi; }
work=$(mktemp -d)
chmod 755 "$work"
mkdir -p "$work/src/sub" "$work/out"
chmod 777 "$work/out"
n=$((RANDOM % 5 + 2))
for i in $(seq "$n"); do head -c 48 /dev/urandom | od -An -tx1 > "$work/src/f$i-$RANDOM.txt"; done
echo deep > "$work/src/sub/deep.txt"
chmod -R a+rX "$work/src"
as-agent /bin/bash -c 'umask 000 && exec /app/bin/backup.sh "$1" "$2"' backup "$work/src" "$work/out/b/c"
test "$(as_owner /usr/bin/find "$work/out/b" -printf '%m %y %P\n' | LC_ALL=C sort)" = "$(printf '%s\n' '600 f c/backup.log' '600 f c/backup.tar.gz' '700 d ' '700 d c')"
test "$(as_owner /bin/cat "$work/out/b/c/backup.log")" = "backed up $((n + 1)) files from $work/src"
mkdir "$work/x"
as_owner /bin/cat "$work/out/b/c/backup.tar.gz" | tar -xzf - --no-same-owner -C "$work/x"
diff -r "$work/src" "$work/x"
echo 1 > /logs/verifier/reward.txt
