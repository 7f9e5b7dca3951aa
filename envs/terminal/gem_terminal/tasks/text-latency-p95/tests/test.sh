#!/bin/bash
# Harbor's verifier and gem's checker at once: the reward is 1 only when the hidden /tests/check.py passes.
# check.py runs the agent's programs through gem's as-agent (as the agent's uid, in a process of its own)
# where gem provides it, directly under Harbor; its inputs are drawn at check time.
set -euo pipefail
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
python3 -I /tests/check.py
echo 1 > /logs/verifier/reward.txt
