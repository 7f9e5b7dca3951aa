"""The task's hidden checker (run by tests/test.sh): exit 0 when the task is solved, else print why and exit 1."""

from __future__ import annotations

import json
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


cases = [[[3, 5], [1, 3]], [[1, 10], [2, 3]], [], [[4, 4]], [[1, 2], [3, 4]], [[5, 9], [1, 2], [2, 5]]]
for _ in range(40):
    pairs = []
    for _ in range(RNG.randrange(0, 9)):
        start = RNG.randrange(-20, 40)
        pairs.append([start, start + RNG.choice([0, 1, 2, 5, 15])])
    cases.append(pairs)


def union(pairs: list[list[int]]) -> list[list[int]]:
    merged: list[list[int]] = []
    for start, end in sorted(pairs):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


# The agent's merge() runs as the agent; it reports its answers and whether the input stayed the same.
program = (
    "import copy, json, sys\nsys.path.insert(0, '/app')\nfrom intervals import merge\n"
    "for pairs in json.load(sys.stdin):\n    before = copy.deepcopy(pairs)\n"
    "    got = merge(pairs)\n    print(json.dumps([[list(p) for p in got], pairs == before]))\n"
)
run = agent(["python3", "-I", "-c", program], json.dumps(cases), cwd=scratch())
check(run.returncode == 0, f"merge() failed: {run.stderr[-500:]}")
got = [json.loads(line) for line in run.stdout.splitlines()]
check(len(got) == len(cases), "merge() did not answer every case")
for pairs, (answer, untouched) in zip(cases, got):
    check(answer == union(pairs), f"merge({pairs}) returned {answer}, not {union(pairs)}")
    check(untouched, f"merge({pairs}) modified its input")
