#!/bin/bash
# Starts three workers in the background.
mkdir -p /app/run
names=()
for _ in 1 2 3; do names+=("w$RANDOM"); done
seed=${names[$((RANDOM % 3))]}
for name in "${names[@]}"; do
  WORKER_SEED=$seed nohup python3 /app/worker.py "$name" > /dev/null 2>&1 &
done
echo "started ${names[*]}"
