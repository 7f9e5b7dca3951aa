#!/bin/bash
# Exit 0 when the task is solved. The agent's program runs as the agent (as-agent), never as the checker.
set -e
cd /app
test "$(as-agent ./hello)" = 'Hello, world!'
