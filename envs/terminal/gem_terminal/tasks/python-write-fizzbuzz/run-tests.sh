#!/bin/bash
# Exit 0 when the task is solved. The agent's program runs as the agent (as-agent): it cannot read
# /tests/expected.txt (the checker's uid's alone), and a second count is drawn now.
set -eo pipefail
cd /app
as-agent python3 fizzbuzz.py 15 | diff - /tests/expected.txt
n=$((RANDOM % 50 + 16))
want=$(for ((i = 1; i <= n; i++)); do if ((i % 15 == 0)); then echo FizzBuzz; elif ((i % 3 == 0)); then echo Fizz; elif ((i % 5 == 0)); then echo Buzz; else echo $i; fi; done)
test "$(as-agent python3 fizzbuzz.py $n)" = "$want"
