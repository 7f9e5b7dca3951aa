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


import ast

REPO = "/app/web"


def assignments(source: str) -> dict[str, object]:
    """The module's top-level constant assignments, read without running it."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        check(False, f"app.py does not parse: {exc}")
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return found


main = git(REPO, "rev-parse", "main")
feature = git(REPO, "rev-parse", "feature")
check(git(REPO, "log", "-1", "--format=%s", "main") == "main: longer timeout", "main's tip changed")
check(git(REPO, "rev-list", "--count", "main") == "2", "main's history changed")
check(git(REPO, "merge-base", main, feature) == main, "feature is not on top of main")
commits = git(REPO, "rev-list", "--reverse", f"{main}..{feature}").split()
subjects = [git(REPO, "log", "-1", "--format=%s", c) for c in commits]
check(subjects == ["feature: add retries", "feature: add cli"], f"feature's commits on main are {subjects}")
check(not git(REPO, "rev-list", "--merges", feature), "feature has a merge commit")
retries, cli = commits
want = {"HOST": "example.org", "TIMEOUT": 30, "RETRIES": 3}
check(assignments(git(REPO, "show", f"{retries}:app.py")) == want, "the retries commit's app.py lost a change")
check(git(REPO, "ls-tree", "--name-only", retries).split() == ["app.py"], "the retries commit has other files")
check(git(REPO, "diff", "--name-only", retries, cli).split() == ["cli.py"], "the cli commit changes more than cli.py")
check(
    git(REPO, "show", f"{main}:app.py") == git(REPO, "show", "main~1:app.py").replace("TIMEOUT = 10", "TIMEOUT = 30"),
    "main's app.py",
)
tip = git(REPO, "show", f"{cli}:app.py")
check("def url(path):" in tip and assignments(tip) == want, "feature's app.py")
cli_text = git(REPO, "show", f"{cli}:cli.py")
check("from app import url" in cli_text and "print(url(sys.argv[1]))" in cli_text, "cli.py changed")
