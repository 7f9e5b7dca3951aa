"""The task's hidden checker (run by tests/test.sh): exit 0 when the task is solved, else print why and exit 1."""

from __future__ import annotations

import contextlib
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


# Played as the agent, in one go (the workers live only as long as this play): each step prints
# "COMMAND STATUS OUTPUT", then what the checker observed.
script = r"""
c="bash /app/ctl.sh"
p=/app/run/worker.pid
step() { out=$($c "$1" 2>/dev/null); code=$?; echo "$1 $code $out"; }
pidf() { cat $p 2>/dev/null || echo none; }
live() { if kill -0 "$1" 2>/dev/null && tr '\0' ' ' < /proc/$1/cmdline | grep -q /app/worker.py; then echo yes; else echo no; fi; }
# a started worker's process shows its command line only once it has exec'd: give it 5 s (a busy machine)
settle() { for _ in $(seq 100); do [ "$(live "$(pidf)")" = yes ] && return; sleep 0.05; done; }
$c stop >/dev/null 2>&1
rm -f $p
step status
step start; settle; first=$(pidf); echo "live $(live $first)"
step status
step start
step stop; echo "gone $(live $first) $(pidf)"
step status
step stop
dead=$(sh -c 'echo $$'); echo $dead > $p
step status
step start; settle; second=$(pidf); echo "live $(live $second)"
step stop
sleep 60 & foreign=$!
echo $foreign > $p
step status
step start; settle; third=$(pidf); echo "live $(live $third)"
kill -0 $foreign && echo "foreign alive"
step stop
kill -0 $foreign && echo "foreign alive"
kill $foreign
echo "pids $first $second $third $dead $foreign"
"""
# The agent's own start left a pidfile. In a container the agent was root and gem's as-agent is another
# uid, so the checker (root there) hands the pidfile's folder over to every uid first; in gem's sandbox
# the folder is already the agent's own and the checker may not change it (nothing to do there).
# Only a real folder: through a link the agent left (/app/run -> /logs/verifier) root would open that
# instead, and the agent's program could then write a reward of its own.
if os.path.realpath("/app/run") == "/app/run" and os.path.isdir("/app/run"):
    with contextlib.suppress(OSError):
        os.chmod("/app/run", 0o777)
with contextlib.suppress(OSError):
    os.remove("/app/run/worker.pid")
run = agent(["bash", "-c", script], timeout=60)
lines = run.stdout.splitlines()
check(lines and lines[-1].startswith("pids "), f"the play ended early: {lines[-5:]} {run.stderr[-300:]}")
first, second, third, dead, foreign = lines[-1].split()[1:]
want = [
    "status 3 stopped",
    f"start 0 started {first}",
    "live yes",
    f"status 0 running {first}",
    f"start 1 already running {first}",
    f"stop 0 stopped {first}",
    "gone no none",
    "status 3 stopped",
    "stop 1 not running",
    "status 3 stopped",
    f"start 0 started {second}",
    "live yes",
    f"stop 0 stopped {second}",
    "status 3 stopped",
    f"start 0 started {third}",
    "live yes",
    "foreign alive",
    f"stop 0 stopped {third}",
    "foreign alive",
]
check(
    len({first, second, third}) == 3 and "none" not in (first, second, third), f"pidfile pids {first} {second} {third}"
)
check(lines[:-1] == want, f"ctl.sh gave {lines[:-1]}, wanted {want}")
