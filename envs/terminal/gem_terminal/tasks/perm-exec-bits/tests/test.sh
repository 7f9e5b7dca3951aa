#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# Modes are read; the scripts are run as the agent (as-agent); the contents must be unchanged.
set -eo pipefail
echo 0 > /logs/verifier/reward.txt
# gem runs the agent's programs through as-agent (as the agent's uid, in a child process); where there is
# none (Harbor), a stand-in on PATH runs them directly, for this script and the programs it starts alike.
command -v as-agent >/dev/null || { shim=$(mktemp -d) && printf '#!/bin/sh\nexec "$@"\n' > "$shim/as-agent" && chmod 755 "$shim/as-agent" && PATH="$shim:$PATH"; }
# Private files are read as their owner: directly where the checker is root (a container, Harbor), else as the agent.
as_owner() { if [ "$(id -u)" = 0 ]; then "$@"; else as-agent "$@"; fi; }
cd /app/tools
test "$(stat -c %a /app/tools)" = 755
test "$(as_owner /usr/bin/find . -mindepth 1 -printf '%m %y %P\n' | LC_ALL=C sort)" = "$(cat <<'MODES'
644 f README.md
644 f data/config.json
644 f lib/common.sh
644 f lib/helpers.py
644 f notes.txt
755 d bin
755 d data
755 d lib
755 f bin/rotate-logs
755 f cleanup
755 f deploy
755 f report.py
MODES
)"
test "$(as_owner /usr/bin/sha256sum README.md bin/rotate-logs cleanup data/config.json deploy lib/common.sh lib/helpers.py notes.txt report.py)" = "$(cat <<'SUMS'
69a4c39c8177b6143d985fc7cce049601f9df147c90ba47e63e3282fdb049584  README.md
6b7ee18abb3f1170a4fa7e61e874dbb0fc1f1eab5a65b35314e2a4b6d8b037d8  bin/rotate-logs
ab887830967b5742166e3081e167940628754582394b480792dec74a85d8b730  cleanup
e57f619ae22beb8bc7a96f644a673697a3f38a5b17977bcccb038c993bc8bc5a  data/config.json
dee96fb06f197d567ca6e6706cf28b42f05b61571d39a384a42c74b48fc52ca3  deploy
4b20e0d1a2260abfd42f786c10a9c1645220d65b55c682b564b110893348d9b6  lib/common.sh
5fd603d2000303866bbf51e8743a29db70fbbb5c1e123c6e9a427bf88a2130aa  lib/helpers.py
98951c2763da81d80f8fbe17723f8d086448e13a756bd61447e867a22858e37f  notes.txt
11b5e0e2da27c72a798c97511462cac75073ab687eb65cca262c0e5b14937e36  report.py
SUMS
)"
test "$(as-agent /app/tools/bin/rotate-logs)" = "rotate ok"
test "$(as-agent /app/tools/cleanup)" = "cleanup ok"
test "$(as-agent /app/tools/deploy)" = "deploy ok"
test "$(as-agent /app/tools/report.py)" = "report ok"
echo 1 > /logs/verifier/reward.txt
