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


import glob
import time

# The task's own sources (this checker's copies) with the agent's Makefile, built as the agent.
folder = scratch()
for name in ("main.c", "util.c", "config.h", "util.h"):
    shutil.copy(f"/tests/src/{name}", folder)
shutil.copy("/app/calc/Makefile", folder)
os.chmod(folder, 0o777)
for path in glob.glob(f"{folder}/*"):
    os.chmod(path, 0o666)
    os.utime(path, (time.time() - 1000, time.time() - 1000))  # older than anything make will build
clock = [time.time()]


def edit(name: str, text: str) -> None:
    """Rewrite a source, dated later than anything built so far (make compares times)."""
    path = os.path.join(folder, name)
    with open(path, "w") as fh:
        fh.write(text)
    clock[0] += 10
    os.utime(path, (clock[0], clock[0]))


def make(*args: str) -> None:
    run = agent(["make", *args], cwd=folder, timeout=120)
    check(run.returncode == 0, f"make {' '.join(args)} failed: {run.stderr[-500:]}")
    clock[0] = max(clock[0], time.time()) + 10


def calc(x: int, want: int) -> None:
    run = agent(["./calc", str(x)], cwd=folder)
    check(
        run.returncode == 0 and run.stdout.strip() == str(want), f"calc {x} printed {run.stdout.strip()!r}, not {want}"
    )


make("-j4")
calc(5, 5 * 3 + 7)
# Incremental, not "rebuild everything every time": nothing changed, so nothing is out of date.
check(agent(["make", "-q"], cwd=folder).returncode == 0, "make -q: the tree is out of date right after make")
scale, offset = RNG.randrange(4, 99), RNG.randrange(8, 999)
edit("config.h", f"#define SCALE {scale}\n")
make()
x = RNG.randrange(1000)
calc(x, x * scale + 7)
edit("util.h", f"#define OFFSET {offset}\nlong shift(long x);\n")
make("-j4")
calc(x, x * scale + offset)
make("clean")
left = sorted(os.path.basename(p) for p in glob.glob(f"{folder}/*.o") + glob.glob(f"{folder}/calc"))
check(not left, f"make clean left {left}")
make("-j4")
calc(x, x * scale + offset)
