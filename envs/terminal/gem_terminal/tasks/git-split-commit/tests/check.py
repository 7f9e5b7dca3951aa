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


def git(repo: str, *args: str) -> str:
    """A git command's stdout (stripped); a failing command fails the task."""
    run = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, timeout=30)
    check(run.returncode == 0, f"git {' '.join(args)}: {run.stderr.strip()[-300:]}")
    return run.stdout.strip()


REPO = "/app/shop"


def expected(state: str, name: str) -> str:
    with open(f"/tests/{state}/{name}") as fh:
        return fh.read().rstrip("\n")


check(git(REPO, "rev-list", "--count", "main") == "3", "main is not its first commit plus two")
check(not git(REPO, "rev-list", "--merges", "main"), "main has a merge commit")
subjects = [git(REPO, "log", "-1", "--format=%s", f"main~{n}") for n in (2, 1, 0)]
check(subjects == ["shop: cart and docs", "cart: add discount", "docs: document discount"], f"subjects {subjects}")
for ref, cart, usage in (("main~2", "before", "before"), ("main~1", "after", "before"), ("main", "after", "after")):
    check(git(REPO, "ls-tree", "-r", "--name-only", ref).split() == ["docs/usage.md", "src/cart.py"], f"{ref}'s files")
    check(git(REPO, "show", f"{ref}:src/cart.py") == expected(cart, "cart.py"), f"{ref}'s src/cart.py")
    check(git(REPO, "show", f"{ref}:docs/usage.md") == expected(usage, "usage.md"), f"{ref}'s docs/usage.md")
