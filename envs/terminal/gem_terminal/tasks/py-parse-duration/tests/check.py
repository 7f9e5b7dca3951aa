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


UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def draw_valid() -> tuple[str, int]:
    chosen = [u for u in UNITS if RNG.random() < 0.5] or [RNG.choice(UNITS)]
    parts, total = [], 0
    for unit, size in chosen:
        value = RNG.choice([0, 1, 7, RNG.randrange(1000)])
        parts.append(f"{value}{unit}")
        total += value * size
    spaced = "".join(p + " " * RNG.choice([0, 0, 1, 2]) for p in parts)
    return " " * RNG.randrange(2) + spaced, total


valid = [draw_valid() for _ in range(30)] + [("45s", 45), ("1h30m", 5400), (" 1d2h3m4s ", 93784)]
invalid = ["", " ", "1x", "h", "1h1h", "1m1h", "-5s", "1.5h", "1 h", "5", "s5", "1s 2", "1d 1d", "١s", "1hh"]
invalid += [f"{RNG.randrange(100)}{a}{RNG.randrange(100)}{b}" for a, b in (("s", "m"), ("h", "d"), ("m", "h"))]
numbers = [0, 1, 59, 60, 3600, 86400, 90061, *(RNG.randrange(10**7) for _ in range(20))]


def canonical(seconds: int) -> str:
    parts = []
    for unit, size in UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


# The agent's module runs as the agent; this process compares its answers with its own.
program = """import json, sys
sys.path.insert(0, "/app")
from duration import format_duration, parse_duration
texts, numbers = json.load(sys.stdin)
def attempt(function, value):
    try:
        return function(value)
    except ValueError:
        return "ValueError"
print(json.dumps([[attempt(parse_duration, t) for t in texts], [attempt(format_duration, n) for n in numbers]]))
"""
texts = [t for t, _ in valid] + invalid
run = agent(["python3", "-I", "-c", program], json.dumps([texts, numbers + [-1]]), cwd=scratch())
check(run.returncode == 0, f"duration.py failed: {run.stderr[-500:]}")
parsed, formatted = json.loads(run.stdout.splitlines()[-1])
for text, got, want in zip(texts, parsed, [n for _, n in valid] + ["ValueError"] * len(invalid)):
    check(got == want and type(got) is type(want), f"parse_duration({text!r}) gave {got!r}, not {want!r}")
for number, got in zip(numbers + [-1], formatted):
    want = canonical(number) if number >= 0 else "ValueError"
    check(got == want, f"format_duration({number}) gave {got!r}, not {want!r}")
