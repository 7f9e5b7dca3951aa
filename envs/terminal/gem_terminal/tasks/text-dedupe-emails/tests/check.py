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


people = [
    (
        "".join(RNG.choice("abcdefghij") for _ in range(RNG.randrange(2, 7))),
        f"u{RNG.randrange(10**4)}@{RNG.choice(['ex.org', 'Mail.COM', 'b.io'])}",
    )
    for _ in range(RNG.randrange(5, 15))
]
rows, best = [], {}
for index in range(RNG.randrange(20, 60)):
    name, email = RNG.choice(people)
    shown = "".join(c.upper() if RNG.random() < 0.3 else c for c in email)
    signup = f"20{RNG.randrange(20, 26)}-{RNG.randrange(1, 13):02d}-{RNG.randrange(1, 29):02d}"
    pad = lambda text: " " * RNG.randrange(2) + text + " " * RNG.randrange(2)  # noqa: E731
    rows.append(f"{pad(name + RNG.choice(['', ' Jr']))},{pad(shown)},{pad(signup)}")
    key = email.lower()
    fields = [f.strip() for f in rows[-1].split(",")]
    if key not in best or signup < best[key][2]:
        best[key] = [fields[0], key, signup]
    if RNG.random() < 0.1:
        rows.append(RNG.choice(["", "   "]))
want = ["name,email,signup", *(",".join(best[k]) for k in sorted(best, key=lambda e: e.encode()))]
run = agent(["bash", "/app/dedupe.sh"], "name,email,signup\n" + "\n".join(rows) + "\n", cwd=scratch())
check(run.returncode == 0, f"dedupe.sh failed: {run.stderr[-500:]}")
check(run.stdout.splitlines() == want, f"dedupe.sh printed {run.stdout.splitlines()[:4]}, wanted {want[:4]}")
