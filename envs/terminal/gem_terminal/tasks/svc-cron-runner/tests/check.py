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
marks = os.path.join(folder, "marks")
jobs, lines = [], ["# jobs drawn now", ""]
for index in range(RNG.randrange(3, 7)):
    name = f"job{index}_{RNG.randrange(1000)}"
    interval = RNG.choice([60, 120, 300, 3600, RNG.randrange(1, 1000)])
    fails = RNG.random() < 0.3
    command = f"echo {name} >> {marks}; echo noise; " + ("exit 3" if fails else "true")
    jobs.append((name, interval, fails))
    lines.append(f"{interval} {name} {command}")
    if RNG.random() < 0.3:
        lines.append("# a comment line 5 x y")
path = os.path.join(folder, "jobs.txt")
with open(path, "w") as fh:
    fh.write("\n".join(lines) + "\n")
os.chmod(path, 0o644)
state = os.path.join(folder, "state")
now, last = RNG.randrange(10**9, 2 * 10**9), {}
for tick in range(8):
    now += RNG.choice([0, 1, 59, 60, 61, 300, RNG.randrange(4000)])
    due = [(n, f) for n, i, f in jobs if n not in last or now - last[n] >= i]
    run = agent(["bash", "/app/runjobs.sh", path, state, str(now)], cwd=folder)
    want = [f"{'failed' if f else 'ran'} {n}" for n, f in due]
    check(run.returncode == 0, f"runjobs.sh exited {run.returncode}: {run.stderr[-300:]}")
    check(run.stdout.splitlines() == want, f"tick {tick} (now {now}): printed {run.stdout.splitlines()}, wanted {want}")
    for name, _ in due:
        last[name] = now
    with open(marks) if os.path.exists(marks) else open(os.devnull) as fh:
        ran = fh.read().split()
    check(ran == [n for n, _ in due], f"tick {tick}: the commands that ran were {ran}")
    if os.path.exists(marks):
        os.remove(marks)
