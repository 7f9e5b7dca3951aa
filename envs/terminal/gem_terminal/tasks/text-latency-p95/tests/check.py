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

paths = ["/", "/api/items", "/api/items/7", "/health", "/a-b_c", "/x/y.z", "/Zeta", "/api/login"]
RNG.shuffle(paths)
paths = paths[: RNG.randrange(3, 8)]
lines, kept = [], {}
for _ in range(RNG.randrange(150, 400)):
    path = RNG.choice(paths)
    status = RNG.choice([200, 200, 200, 201, 204, 301, 302, 304, 404, 499, 500, 502, 503])
    ms = RNG.choice([RNG.randrange(1, 50), RNG.randrange(50, 2000), RNG.randrange(1, 100000)])
    query = RNG.choice(["", "?page=2", "?q=a+b&x=1", "?"])
    method = RNG.choice(["GET", "POST", "DELETE"])
    when = f"{RNG.randrange(1, 28):02d}/Mar/2026:{RNG.randrange(24):02d}:{RNG.randrange(60):02d}:00 +0000"
    size = RNG.choice(["0", "-", str(RNG.randrange(10**6))])
    lines.append(
        f'10.{RNG.randrange(256)}.0.{RNG.randrange(256)} - - [{when}] "{method} {path}{query} HTTP/1.1" {status} {size} {ms}'
    )
    if status < 500:
        kept.setdefault(path, []).append(ms)
    if RNG.random() < 0.05:
        lines.append(
            RNG.choice(["", "garbage", '- - - [x] "GET" 200', f'1.2.3.4 - - [{when}] "GET {path} HTTP/1.1" 200 5'])
        )
want = []
for path in sorted(kept, key=lambda p: p.encode()):
    times = sorted(kept[path])
    want.append(f"{path} {len(times)} {times[math.ceil(0.95 * len(times)) - 1]}")
run = agent(["bash", "/app/latency.sh"], "\n".join(lines) + "\n", cwd=scratch())
check(run.returncode == 0, f"latency.sh failed: {run.stderr[-500:]}")
check(run.stdout.splitlines() == want, f"latency.sh printed {run.stdout.splitlines()[:4]}, wanted {want[:4]}")
