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


REPO = "/app/parser"

check(git(REPO, "rev-list", "--count", "dev") == "4", "dev's history changed")
check(git(REPO, "rev-list", "--count", "main") == "2", "main is not its first commit plus one")
check(not git(REPO, "rev-list", "--merges", "main"), "main has a merge commit")
check(
    git(REPO, "log", "-1", "--format=%s", "main") == "fix: parse_int accepts signs and spaces", "the commit's subject"
)
check(
    git(REPO, "rev-parse", "main~1") == git(REPO, "rev-list", "--max-parents=0", "dev"), "main's first commit changed"
)
check(git(REPO, "ls-tree", "-r", "--name-only", "main").split() == ["README.md", "parse.py"], "main holds other files")
check(git(REPO, "show", "main:README.md") == git(REPO, "show", "main~1:README.md"), "README.md changed on main")

# The committed parse.py runs as the agent, on inputs drawn now; this process compares the answers.
folder = scratch()
with open(os.path.join(folder, "parse.py"), "w") as fh:
    fh.write(git(REPO, "show", "main:parse.py") + "\n")
cases = [
    f"{' ' * RNG.randrange(3)}{RNG.choice(['', '+', '-'])}{RNG.randrange(10**6)}{' ' * RNG.randrange(3)}"
    for _ in range(20)
]
cases += ["", "-", "+", "1-2", "--5", "12a", " ", "4 2", "٣", RNG.choice(["x", "0x10", "1e3"])]


def want(text: str) -> str:
    body = text.strip()
    digits = body[1:] if body[:1] in ("+", "-") else body
    if not (digits.isascii() and digits.isdigit()):
        return "ValueError"
    return str(-int(digits) if body.startswith("-") else int(digits))


program = (
    "import json, sys\nsys.path.insert(0, '.')\nfrom parse import parse_int\n"
    "for case in json.load(sys.stdin):\n"
    "    try:\n        print(parse_int(case))\n    except ValueError:\n        print('ValueError')\n"
)
run = agent(["python3", "-I", "-c", program], json.dumps(cases), cwd=folder)
check(run.returncode == 0, f"parse.py failed: {run.stderr[-500:]}")
check(run.stdout.splitlines() == [want(c) for c in cases], f"parse_int answers {run.stdout.splitlines()[:8]}")
