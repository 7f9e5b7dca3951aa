#!/usr/bin/env bash
# Self-play on the CPU (docs/multiagent.md, "A CPU demo"): a virtualenv with gem-core, gem-multiagent and
# gem-trl (CPU torch), then a tiny model, built locally from a config, plays Kuhn Poker against itself in half
# the games, the scripted and the random player in a quarter each (--opponents), with a baseline per information
# set (python -m gem_trl.selfplay);
# win rates, chips per game and the per-card strategy table before and after, in runs/selfplay
# (metrics.jsonl, metrics.png).
#   bash scripts/selfplay_demo.sh                 # venv in .venv-trl-demo (the text demo's), reused
#   bash scripts/selfplay_demo.sh --seed 1        # another seed; --help lists every option
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv-trl-demo}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import gem_trl.selfplay, gem_multiagent, matplotlib, tqdm" 2>/dev/null; then
    echo "installing gem-core, gem-multiagent and gem-trl (CPU torch) into $VENV ..."
    start=$(date +%s)
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
        -e "$ROOT" -e "$ROOT/envs/multiagent" -e "$ROOT/adapters/trl[demo]"
    echo "installed in $(( $(date +%s) - start ))s"
fi
cd "$ROOT"
HF_HUB_OFFLINE=1 exec "$VENV/bin/python" -m gem_trl.selfplay --output-dir "$ROOT/runs/selfplay" "$@"
