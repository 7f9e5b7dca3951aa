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


import re
from collections import Counter

folder = scratch()
vocabulary = ["".join(RNG.choice("abcdefgXYZ") for _ in range(RNG.randrange(1, 7))) for _ in range(25)]


def text() -> str:
    return "".join(
        RNG.choice(vocabulary) + RNG.choice([" ", "\n", ", ", "-", "42", "é", "_"])
        for _ in range(RNG.randrange(20, 120))
    )


def expect(texts: list[str], top: int = 10, min_length: int = 1) -> list[str]:
    counts = Counter(w.lower() for t in texts for w in re.findall(r"[A-Za-z]+", t) if len(w) >= min_length)
    return [f"{c} {w}" for w, c in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top]]


files = []
for index in range(2):
    files.append((os.path.join(folder, f"in{index}.txt"), text()))
    with open(files[-1][0], "w") as fh:
        fh.write(files[-1][1])
    os.chmod(files[-1][0], 0o644)
top, length = RNG.randrange(1, 15), RNG.randrange(1, 4)
runs = [
    (
        ["--top", str(top), "--min-length", str(length), files[0][0], files[1][0]],
        "",
        expect([files[0][1], files[1][1]], top, length),
    ),
    ([], files[0][1], expect([files[0][1]])),
    (["--min-length", str(length + 1)], files[1][1], expect([files[1][1]], 10, length + 1)),
]
for args, stdin, want in runs:
    run = agent(["python3", "/app/wordfreq.py", *args], stdin, cwd=folder)
    check(
        run.returncode == 0 and run.stdout.splitlines() == want,
        f"wordfreq {args}: {run.stdout.splitlines()[:3]} ({run.returncode}), wanted {want[:3]}",
    )
for bad in (["--top", "0"], ["--top", "x"], ["--min-length", "-2"]):
    run = agent(["python3", "/app/wordfreq.py", *bad, files[0][0]], cwd=folder)
    check(
        run.returncode == 2 and not run.stdout and run.stderr.strip(),
        f"wordfreq {bad}: status {run.returncode}, stdout {run.stdout[:80]!r}",
    )
missing = os.path.join(folder, f"missing{RNG.randrange(10**6)}.txt")
run = agent(["python3", "/app/wordfreq.py", files[0][0], missing], cwd=folder)
check(
    run.returncode == 1 and os.path.basename(missing) in run.stderr,
    f"an unreadable file: status {run.returncode}, stderr {run.stderr[:120]!r}",
)
