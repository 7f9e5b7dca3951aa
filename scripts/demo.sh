#!/usr/bin/env bash
# The README's main job: on a fresh machine, set up a virtualenv and train a tiny model,
# built locally from a config, on a game env on the CPU with ReBN (see adapters/trl/demo.sh).
set -euo pipefail
exec bash "$(dirname "$0")/../adapters/trl/demo.sh" "$@"
