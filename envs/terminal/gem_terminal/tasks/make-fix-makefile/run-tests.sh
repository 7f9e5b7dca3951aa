#!/bin/bash
# Exit 0 when the task is solved. The agent's Makefile and program run as the agent (as-agent).
set -e
cd /app
as-agent make -s >/dev/null
test "$(as-agent ./app)" = 'sum=7'
