"""The task's hidden checker (run by tests/test.sh): exit 0 when the task is solved, else print why and exit 1."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile

#: gem runs the agent's programs as the agent's uid, in a process of its own, through ``as-agent``;
#: Harbor has no such program: there they run directly.
AGENT = ["as-agent"] if shutil.which("as-agent") else []
RNG = random.SystemRandom()


def agent(args: list[str], stdin: str = "", cwd: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run the agent's program as the agent: its exit code, stdout and stderr (never past ``timeout``)."""
    return subprocess.run([*AGENT, *args], input=stdin, capture_output=True, text=True, cwd=cwd, timeout=timeout)


def scratch() -> str:
    """A fresh folder the agent's programs may write (under gem they run as another uid)."""
    path = tempfile.mkdtemp()
    os.chmod(path, 0o777)
    return path


def check(ok: object, why: str) -> None:
    """Fail the task with ``why`` unless ``ok``."""
    if not ok:
        print("FAIL:", why)
        sys.exit(1)


folder = scratch()
first, second = (f"v{RNG.randrange(10**6)}-{RNG.choice(['a', 'b b', 'c=d'])}" for _ in range(2))
# Played as the agent, in one process group: start the worker, signal it, wait for each answer (bounded).
script = f"""
cd {folder}
printf 'label=%s\\n' "$1" > w.conf
python3 /app/worker.py w.conf w.log &
pid=$!
# the line, or give up at once when the worker is gone (and after 8 s at most)
seen() {{
  for _ in $(seq 400); do
    grep -qxF "$1" w.log 2>/dev/null && return 0
    kill -0 $pid 2>/dev/null || return 1
    sleep 0.02
  done
  return 1
}}
seen "started label=$1" || {{ echo "no start"; exit 1; }}
printf 'label=%s\\n' "$2" > w.conf
kill -HUP $pid
seen "reloaded label=$2" || {{ echo "no reload"; exit 1; }}
kill -USR1 $pid
seen "status label=$2" || {{ echo "no status"; exit 1; }}
kill -TERM $pid
wait $pid
echo "exit $?"
cat w.log
"""
run = agent(["bash", "-c", script, "play", first, second], timeout=60)
want = ["exit 0", f"started label={first}", f"reloaded label={second}", f"status label={second}", "stopped"]
check(
    run.stdout.splitlines() == want, f"the worker gave {run.stdout.splitlines()}, wanted {want} ({run.stderr[-300:]})"
)
