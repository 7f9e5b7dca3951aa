#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# The report is compared with the list; the modes are read (each one's other bits must be as they were).
set -eo pipefail
echo 0 > /logs/verifier/reward.txt
# gem runs the agent's programs through as-agent (as the agent's uid, in a child process); where there is
# none (Harbor), a stand-in on PATH runs them directly, for this script and the programs it starts alike.
command -v as-agent >/dev/null || { shim=$(mktemp -d) && printf '#!/bin/sh\nexec "$@"\n' > "$shim/as-agent" && chmod 755 "$shim/as-agent" && PATH="$shim:$PATH"; }
# Private files are read as their owner: directly where the checker is root (a container, Harbor), else as the agent.
as_owner() { if [ "$(id -u)" = 0 ]; then "$@"; else as-agent "$@"; fi; }
test "$(cat /app/world_writable.txt)" = "$(cat <<'LIST'
cache
conf/site.conf
css
index.html
js/app.js
shared
shared/team.txt
uploads
uploads/.keep
LIST
)"
test "$(stat -c %a /app/www)" = 755
cd /app/www
test "$(as_owner /usr/bin/find . -mindepth 1 -printf '%m %y %P\n' | LC_ALL=C sort)" = "$(cat <<'MODES'
1775 d cache
2775 d shared
600 f conf/site.conf
644 f about.html
644 f cache/.keep
644 f css/site.css
644 f js/app.js
644 f js/vendor.js
660 f shared/team.txt
664 f index.html
664 f logs/access.log
664 f uploads/.keep
751 d conf
755 d bin
755 d css
755 d js
775 d logs
775 d uploads
775 f bin/run.sh
MODES
)"
echo 1 > /logs/verifier/reward.txt
