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
test "$(stat -c %a /app/projects/atlas)" = 2775
cd /app/projects/atlas
test "$(as_owner /usr/bin/find . -mindepth 1 -printf '%m %y %P\n' | LC_ALL=C sort)" = "$(cat <<'MODES'
2775 d bin
2775 d data
2775 d docs
2775 d docs/img
2775 d src
2775 d src/lib
664 f README.md
664 f data/.keep
664 f docs/guide.md
664 f docs/img/logo.txt
664 f src/lib/util.py
664 f src/main.py
775 f bin/build.sh
775 f bin/deploy.sh
MODES
)"
test "$(as_owner /usr/bin/sha256sum README.md bin/build.sh bin/deploy.sh data/.keep docs/guide.md docs/img/logo.txt src/lib/util.py src/main.py)" = "$(cat <<'SUMS'
235958713483b7e7abbb5b6948348109e893b051d09bd198d602f9f0aeec6be8  README.md
0b98ad47cc3c2a0f38a73bc1935adbfb22507fa4b9e8c7473774866de309b714  bin/build.sh
b07773433c44519067f196caa4a4e5b19295577b4bd5abd6d6456a8bac2bcbba  bin/deploy.sh
e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  data/.keep
fe0873b5ea47a58c416308900def28e3b8f1285a44cf625e7d3cb9522424f51b  docs/guide.md
6b3a57e08348d9ac58fa60ecbd45a9cc29e107b139cf6858577876d9875bab25  docs/img/logo.txt
c01e266fbff6320cc870aa2d3c237988d2de86cdfa1d406980d3a7c98fe9c480  src/lib/util.py
111c5bed78a1f81a99a0ede2e4dbaa900ebf10b2a4526eb07660543aef1b17f6  src/main.py
SUMS
)"
echo 1 > /logs/verifier/reward.txt
