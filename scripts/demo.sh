#!/usr/bin/env bash
# The demo: sets up a virtualenv on a fresh machine and runs the main job on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-demo
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -e .
"$venv/bin/gem" list
"$venv/bin/gem" check --all
