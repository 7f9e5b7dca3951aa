#!/bin/bash
# Exit 0 when the task is solved. The agent's program runs as the agent (as-agent), on numbers drawn now.
set -e
cd /app
test "$(as-agent python3 calc.py 2 3)" = 5
a=$((RANDOM % 1000 - 500))
b=$((RANDOM % 1000 - 500))
test "$(as-agent python3 calc.py $a $b)" = $((a + b))
