#!/usr/bin/env bash
# Play Harbor task folders under Harbor itself: its oracle agent (the reference solution) must score 1 and
# its nop agent 0 on each. Prints one row per task and exits 1 unless every row is right.
#
#   scripts/harbor_check.sh envs/terminal/gem_terminal/tasks/sqlite-*        # some tasks
#   scripts/harbor_check.sh envs/terminal/gem_terminal/tasks/*/              # all shipped tasks
#
# Needs: Harbor (`harbor` on PATH, or HARBOR=/path/to/harbor; it wants Python >= 3.12, so keep it in a venv
# of its own: python3.12 -m venv /tmp/harbor-venv && /tmp/harbor-venv/bin/pip install harbor), Docker with
# a daemon and its compose plugin (`docker compose version`; on Debian the docker-compose package, or
# DOCKER_CONFIG naming a folder whose cli-plugins/ holds it). Harbor's code stays out of this repository.
#
# The `FROM` image of the shipped tasks (Terminal-Bench's ubuntu-24-04) is served by no registry here: where
# Docker lacks it, gem's stand-in (the image map's, docs/terminal.md) is built or found with
# `$GEM_PYTHON -m gem_terminal.container prepare` and tagged under that name, as a user with no registry
# would. GEM_PYTHON (default python3) must import gem_terminal; GEM_TERMINAL_CA_BUNDLE is passed on.
#
# Settings: HARBOR_JOBS (where Harbor writes its jobs; default a fresh temporary folder), HARBOR_CONCURRENT
# (trials at once, default 2), HARBOR_TIMEOUT_S (each of the two jobs, default 3600).
set -euo pipefail

if [ $# -eq 0 ]; then
    echo "usage: $0 TASK_FOLDER..." >&2
    exit 2
fi
harbor=${HARBOR:-harbor}
gem_python=${GEM_PYTHON:-python3}
concurrent=${HARBOR_CONCURRENT:-2}
timeout_s=${HARBOR_TIMEOUT_S:-3600}
command -v "$harbor" >/dev/null || { echo "error: no harbor at '$harbor' (set HARBOR)" >&2; exit 2; }
docker compose version >/dev/null 2>&1 || {
    echo "error: 'docker compose' does not run (install Docker's compose plugin, or set DOCKER_CONFIG)" >&2
    exit 2
}

# Harbor takes one folder of tasks: link the named ones into a fresh dataset folder.
dataset=$(mktemp -d)
jobs=${HARBOR_JOBS:-$(mktemp -d)}
mkdir -p "$jobs"
names=()
for folder in "$@"; do
    folder=$(cd "$folder" && pwd)
    name=$(basename "$folder")
    if [ ! -f "$folder/task.toml" ] || [ ! -f "$folder/tests/test.sh" ]; then
        echo "error: $folder is not a Harbor task (task.toml, tests/test.sh)" >&2
        exit 2
    fi
    ln -s "$folder" "$dataset/$name"
    names+=("$name")
    image=$(sed -n 's/^FROM[[:space:]]\+\(--platform=[^[:space:]]*[[:space:]]\+\)\?\([^[:space:]]*\).*/\2/p' \
        "$folder/environment/Dockerfile" | tail -n 1)
    if ! docker image inspect "$image" >/dev/null 2>&1; then
        case "$image" in
            ghcr.io/laude-institute/t-bench/ubuntu-24-04*) suite=trixie ;;
            *) echo "error: Docker has no image $image (pull or tag it first)" >&2; exit 2 ;;
        esac
        standin=$("$gem_python" -m gem_terminal.container prepare "$suite" --runtime docker | tail -n 1 | cut -d' ' -f1)
        docker tag "$standin" "$image"
        echo "tagged gem's stand-in $standin as $image"
    fi
done

for agent in oracle nop; do
    timeout "$timeout_s" "$harbor" run -p "$dataset" -a "$agent" -e docker -n "$concurrent" -o "$jobs" \
        --job-name "$agent" -y -q >"$jobs/$agent.log" 2>&1 || echo "harbor run -a $agent exited $? (log: $jobs/$agent.log)"
done

# One row per task: each agent's reward, or the exception Harbor recorded instead.
"${HARBOR_PYTHON:-$(dirname "$(command -v "$harbor")")/python}" - "$jobs" "${names[@]}" <<'PY'
import json
import sys
from pathlib import Path

jobs, names = Path(sys.argv[1]), sys.argv[2:]
found = {}
for agent in ("oracle", "nop"):
    for result in (jobs / agent).glob("*/result.json"):
        trial = json.loads(result.read_text())
        name = Path(trial["task_id"]["path"]).name
        rewards = (trial.get("verifier_result") or {}).get("rewards") or {}
        error = (trial.get("exception_info") or {}).get("exception_type")
        found[(name, agent)] = error or rewards.get("reward")
bad = 0
print(f"{'task':40} {'oracle':>10} {'nop':>10}  verdict")
for name in names:
    oracle, nop = found.get((name, "oracle"), "missing"), found.get((name, "nop"), "missing")
    right = oracle == 1.0 and nop == 0.0
    bad += not right
    print(f"{name:40} {str(oracle):>10} {str(nop):>10}  {'ok' if right else 'WRONG'}")
print(f"{len(names) - bad} of {len(names)} tasks: oracle 1 and nop 0 (jobs: {jobs})")
sys.exit(1 if bad else 0)
PY
