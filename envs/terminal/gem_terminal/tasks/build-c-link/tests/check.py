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


import math

# The agent's project, copied and built from clean as the agent; bin/rms runs on numbers drawn now.
folder = os.path.join(scratch(), "rms")
shutil.copytree("/app/rms", folder, ignore=shutil.ignore_patterns("bin", "*.o"))
for root, dirs, files in os.walk(folder):
    for name in dirs + files:
        os.chmod(os.path.join(root, name), 0o777)
os.chmod(folder, 0o777)
run = agent(["make"], cwd=folder, timeout=120)
check(run.returncode == 0, f"make failed: {(run.stdout + run.stderr)[-600:]}")
program = os.path.join(folder, "bin", "rms")
with open(program, "rb") as fh:
    check(fh.read(4) == b"\x7fELF", "bin/rms is not a compiled program")
for count in (1, 2, 5, RNG.randrange(6, 40)):
    xs = [round(RNG.uniform(-500, 500), 2) for _ in range(count)]
    run = agent([program, *map(str, xs)], cwd=folder)
    want = f"{math.sqrt(sum(x * x for x in xs) / len(xs)):.3f}"
    check(run.returncode == 0 and run.stdout.strip() == want, f"rms {xs} printed {run.stdout.strip()!r}, not {want}")
    check(run.stderr.strip() == f"samples: {count}", f"samples printed {run.stderr.strip()!r}")
