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


def git(repo: str, *args: str) -> str:
    """A git command's stdout (stripped); a failing command fails the task."""
    run = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, timeout=30)
    check(run.returncode == 0, f"git {' '.join(args)}: {run.stderr.strip()[-300:]}")
    return run.stdout.strip()


REPO = "/app/mathlib"
GOOD = "return (s[n // 2 - 1] + s[n // 2]) / 2"

check(git(REPO, "rev-list", "--count", "main") == "42", "main is not its 41 commits plus one")
check(not git(REPO, "rev-list", "--merges", "main"), "main has a merge commit")
history = git(REPO, "rev-list", "--reverse", "main~1").split()
subjects = [git(REPO, "log", "-1", "--format=%s", c) for c in history]
check(subjects == ["stats: mean and median", *(f"stats: step {i}" for i in range(1, 41))], "the history changed")
# The first commit whose median() lost the even-length line: found here from the committed objects.
bad = next(c for c in history if GOOD not in git(REPO, "show", f"{c}:stats.py"))
check(
    git(REPO, "rev-parse", "-q", "--verify", "refs/tags/first-bad^{commit}") == bad,
    "first-bad is not the first bad commit",
)


def changes(old: str, new: str) -> list[str]:
    """The lines a diff removes and adds (no headers, no line numbers)."""
    text = git(REPO, "diff", "--no-ext-diff", "-U0", old, new)
    return [line for line in text.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]


check(changes(bad, f"{bad}~1") == changes("main~1", "main"), "main's last commit does not undo exactly the bad commit")

# The committed stats.py runs as the agent, on lists drawn now; this process compares the answers.
folder = scratch()
with open(os.path.join(folder, "stats.py"), "w") as fh:
    fh.write(git(REPO, "show", "main:stats.py") + "\n")
cases = [[RNG.randrange(-50, 50) for _ in range(RNG.randrange(1, 9))] for _ in range(25)]
program = "import json, sys\nsys.path.insert(0, '.')\nfrom stats import median\nprint(json.dumps([median(xs) for xs in json.load(sys.stdin)]))\n"
run = agent(["python3", "-I", "-c", program], json.dumps(cases), cwd=folder)
check(run.returncode == 0, f"stats.py failed: {run.stderr[-500:]}")


def median(xs: list[int]) -> float:
    s, n = sorted(xs), len(xs)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


check(json.loads(run.stdout.splitlines()[-1]) == [median(xs) for xs in cases], "median() is still wrong")
