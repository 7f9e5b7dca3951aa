#!/usr/bin/env bash
# One command on a fresh machine: a virtualenv with gem-core, gem-games and gem-trl (CPU torch),
# then a tiny model, built locally from a config, learns GuessTheNumber with ReBN on the CPU
# (python -m gem_trl.demo): a progress bar, metrics.jsonl and metrics.png in runs/demo.
#   bash adapters/trl/demo.sh                  # venv in .venv-trl-demo, reused on later runs
#   bash adapters/trl/demo.sh --seed 1         # another seed; --help lists every option
#   VENV=/tmp/v bash adapters/trl/demo.sh --steps 20 --output-dir /tmp/demo
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VENV:-$ROOT/.venv-trl-demo}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import gem_trl.demo, gem_games, matplotlib, tqdm" 2>/dev/null; then
    echo "installing gem-core, gem-games and gem-trl (CPU torch) into $VENV ..."
    start=$(date +%s)
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
        -e "$ROOT" -e "$ROOT/envs/games" -e "$ROOT/adapters/trl[demo]"
    echo "installed in $(( $(date +%s) - start ))s"
fi
cd "$ROOT"
HF_HUB_OFFLINE=1 exec "$VENV/bin/python" -m gem_trl.demo --output-dir "$ROOT/runs/demo" "$@"
