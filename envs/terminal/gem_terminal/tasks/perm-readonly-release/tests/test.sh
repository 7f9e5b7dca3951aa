#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# CHECKSUMS is compared with the files' known sums, which the files must still have; the modes are read.
set -eo pipefail
echo 0 > /logs/verifier/reward.txt
# gem runs the agent's programs through as-agent (as the agent's uid, in a child process); where there is
# none (Harbor), a stand-in on PATH runs them directly, for this script and the programs it starts alike.
command -v as-agent >/dev/null || { shim=$(mktemp -d) && printf '#!/bin/sh\nexec "$@"\n' > "$shim/as-agent" && chmod 755 "$shim/as-agent" && PATH="$shim:$PATH"; }
# Private files are read as their owner: directly where the checker is root (a container, Harbor), else as the agent.
as_owner() { if [ "$(id -u)" = 0 ]; then "$@"; else as-agent "$@"; fi; }
test "$(stat -c %a /app/release/CHECKSUMS)" = 444
test "$(cat /app/release/CHECKSUMS)" = "$(cat <<'SUMS'
022804d19c8fe566dc00dca4721c1eadf6ed71164d647a2e77493ac87c4fe3a6  VERSION
cb856c8e35b1c4f259d04d5f4ef45487a2ac553e9ba619bab8b8429e81c718d9  bin/app
7b920614f751289852b59e0e80ddfeef9ddec7110f2984195b9a7cb9b22c70fe  bin/helper
ec528817206dccb8115fa77ec2a4d4299d1a966efa9cc2247b3d150ea1930669  config.ini
454921adbf2f9465bcfbcb8b8a58c6f4b43fd92f8254095e2180a8584a5f49db  lib/core.py
80ccdff6924c5ec92318bbca2175b8a5c54c24e99fadf9c9ff9ab7261f72001c  lib/util.py
9d2ff7b9fd4c78aff199b1f5b7d2c4a84bc84edf1af5d9c61be04c4ce7739833  share/doc/README
SUMS
)"
test "$(stat -c %a /app/release/v2.3)" = 555
cd /app/release/v2.3
test "$(as_owner /usr/bin/sha256sum VERSION bin/app bin/helper config.ini lib/core.py lib/util.py share/doc/README)" = "$(cat /app/release/CHECKSUMS)"
test "$(as_owner /usr/bin/find . -mindepth 1 -printf '%m %y %P\n' | LC_ALL=C sort)" = "$(cat <<'MODES'
440 f config.ini
444 f VERSION
444 f lib/core.py
444 f lib/util.py
444 f share/doc/README
550 f bin/helper
555 d bin
555 d lib
555 d share
555 d share/doc
555 f bin/app
MODES
)"
echo 1 > /logs/verifier/reward.txt
