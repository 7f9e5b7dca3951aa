#!/bin/bash
# More output than one command of the agent's may print (16 KiB): a verifier's own output is not capped.
seq 1 5000
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env

uvx -p 3.13 -w pytest==8.4.1 -w tomli-w==1.0.0 pytest /tests/test_outputs.py -rA

if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
