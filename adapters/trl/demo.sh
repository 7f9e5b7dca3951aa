#!/usr/bin/env bash
# One command on a fresh machine: a virtualenv with gem-core, gem-games and gem-trl (CPU torch),
# then a few ReBN training steps of a tiny local model on a game, printing the reward per step.
#   bash adapters/trl/demo.sh            # venv in .venv-trl-demo, reused on later runs
#   VENV=/tmp/v bash adapters/trl/demo.sh --steps 10 --env core:NumberGuess-v0
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VENV:-$ROOT/.venv-trl-demo}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import gem_trl, gem_games" 2>/dev/null; then
    echo "installing gem-core, gem-games and gem-trl (CPU torch) into $VENV ..."
    start=$(date +%s)
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
        -e "$ROOT" -e "$ROOT/envs/games" -e "$ROOT/adapters/trl"
    echo "installed in $(( $(date +%s) - start ))s"
fi
cd "$ROOT"
HF_HUB_OFFLINE=1 exec "$VENV/bin/python" examples/trl_train.py --output-dir "${TMPDIR:-/tmp}/gem-trl-demo" "$@"
