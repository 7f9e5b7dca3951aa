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


REPO = "/app/lib"

check(git(REPO, "rev-list", "--count", "main") == "4", "main is not its three commits plus one")
check(not git(REPO, "rev-list", "--merges", "main"), "main has a merge commit")
check(git(REPO, "log", "-1", "--format=%s", "main~1") == "lib: more", "main's earlier history changed")
old = git(REPO, "show", "main~1:VERSION")
major, minor, _ = (int(part) for part in old.split("."))
new = f"{major}.{minor + 1}.0"
check(git(REPO, "show", "main:VERSION") == new, f"VERSION is not {new}")
check(
    sorted(git(REPO, "diff", "--name-only", "main~1", "main").split()) == ["CHANGELOG.md", "VERSION"],
    "the commit changes other files",
)
before = [line for line in git(REPO, "show", "main~1:CHANGELOG.md").splitlines() if line.strip()]
after = [line for line in git(REPO, "show", "main:CHANGELOG.md").splitlines() if line.strip()]
at = before.index("## Unreleased")
check(after == [*before[: at + 1], f"## {new}", *before[at + 1 :]], "CHANGELOG.md's headings")
tag = f"v{new}"
check(git(REPO, "cat-file", "-t", f"refs/tags/{tag}") == "tag", f"{tag} is not an annotated tag")
check(
    git(REPO, "rev-parse", f"refs/tags/{tag}^{{commit}}") == git(REPO, "rev-parse", "main"), f"{tag} is not main's tip"
)
message = git(REPO, "for-each-ref", "--format=%(contents:subject)", f"refs/tags/{tag}")
check(message == f"Release {new}", f"{tag}'s message is {message!r}")
check(git(REPO, "rev-parse", "v1.0.0^{commit}") == git(REPO, "rev-parse", "main~3"), "v1.0.0 moved")
