#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# Modes are read, not tried; the contents must be unchanged.
set -eo pipefail
echo 0 > /logs/verifier/reward.txt
# gem runs the agent's programs through as-agent (as the agent's uid, in a child process); where there is
# none (Harbor), a stand-in on PATH runs them directly, for this script and the programs it starts alike.
command -v as-agent >/dev/null || { shim=$(mktemp -d) && printf '#!/bin/sh\nexec "$@"\n' > "$shim/as-agent" && chmod 755 "$shim/as-agent" && PATH="$shim:$PATH"; }
# Private files are read as their owner: directly where the checker is root (a container, Harbor), else as the agent.
as_owner() { if [ "$(id -u)" = 0 ]; then "$@"; else as-agent "$@"; fi; }
test "$(stat -c %a /app/deploy/ssh)" = 700
listing=$(as_owner /usr/bin/find /app/deploy/ssh -mindepth 1 -printf '%m %y %P\n' | LC_ALL=C sort)
# 400 is as good as 600 for the private files; a copy of the key may stay if it is as private
test "$(echo "$listing" | grep -v ' id_ed25519.bak$' | sed 's/^400 /600 /')" = "$(printf '%s\n' '600 f authorized_keys' '600 f config' '600 f id_ed25519' '644 f id_ed25519.pub' '644 f known_hosts')"
if echo "$listing" | grep -q ' id_ed25519.bak$'; then echo "$listing" | grep -qx -e '600 f id_ed25519.bak' -e '400 f id_ed25519.bak'; fi
test "$(as_owner /usr/bin/sha256sum /app/deploy/ssh/authorized_keys /app/deploy/ssh/config /app/deploy/ssh/id_ed25519 /app/deploy/ssh/id_ed25519.pub /app/deploy/ssh/known_hosts)" = "$(cat <<'SUMS'
68ff0ced416f99ad0b49433681c88463a290c3adb4458e65d74be16d2d5f52dc  /app/deploy/ssh/authorized_keys
e8105ce353ad9dfd4eb0080521d90ee6578023d615adedd35d9194caeb4c56df  /app/deploy/ssh/config
c21e4ffa07d697c95696369b5306a957a74588657b5b463e4dacb0e9b606286b  /app/deploy/ssh/id_ed25519
c3f16f067a229554725ca3790983b499d0f648fabd34a94f82fb770d6e9c5b6f  /app/deploy/ssh/id_ed25519.pub
5cb64273e75aff1e32870c94c869fbeab232681ff5ac51dc06ddb8adfbb0dc8d  /app/deploy/ssh/known_hosts
SUMS
)"
echo 1 > /logs/verifier/reward.txt
