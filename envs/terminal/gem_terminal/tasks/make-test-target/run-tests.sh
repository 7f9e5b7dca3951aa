#!/bin/bash
# Exit 0 when the task is solved. The agent's code runs as the agent (as-agent), on a string drawn now;
# the checker compares what it printed.
set -eo pipefail
cd /app
as-agent make -s test >/dev/null
as-agent make -n test | grep -qx 'python3 test_util.py'
s=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
test -n "$s"
test "$(as-agent python3 -I -c 'import sys; sys.path.append("/app"); import util; print(util.reverse(sys.argv[1]))' "$s")" = "$(printf %s "$s" | rev)"
