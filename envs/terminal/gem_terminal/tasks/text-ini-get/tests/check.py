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


sections = [f"{RNG.choice(['db', 'Server', 'a.b', 'x y'])}{RNG.randrange(100)}" for _ in range(4)]
keys = ["port", "Port", "host", "path", "a.b", f"k{RNG.randrange(1000)}"]
lines, table = ["; generated"], {}
for _ in range(RNG.randrange(3, 9)):
    section = RNG.choice(sections)
    lines.append(" " * RNG.randrange(2) + f"[{section}]" + " " * RNG.randrange(2))
    for _ in range(RNG.randrange(0, 6)):
        key = RNG.choice(keys)
        value = RNG.choice(["8080", "a = b", "x;y", "#not a comment", "", "/srv/data dir", str(RNG.randrange(10**6))])
        kind = RNG.random()
        if kind < 0.15:
            lines.append(RNG.choice([";", "#", "  ;", "  #"]) + f" {key} = {value}")
        elif kind < 0.2:
            lines.append("")
        else:
            lines.append(
                " " * RNG.randrange(2)
                + key
                + " " * RNG.randrange(2)
                + "="
                + " " * RNG.randrange(2)
                + value
                + " " * RNG.randrange(2)
            )
            table[(section, key)] = value.strip()
folder = scratch()
path = os.path.join(folder, "conf.ini")
with open(path, "w") as fh:
    fh.write("\n".join(lines) + "\n")
os.chmod(path, 0o644)
questions = RNG.sample(sorted(table), min(len(table), 10)) + [
    (RNG.choice(sections), RNG.choice(keys)) for _ in range(4)
]
questions.append(("nowhere", "port"))
for section, key in questions:
    run = agent(["bash", "/app/iniget.sh", path, section, key], cwd=folder)
    if (section, key) in table:
        check(
            run.returncode == 0 and run.stdout == table[(section, key)] + "\n",
            f"[{section}] {key}: {run.stdout!r}, wanted {table[(section, key)]!r}",
        )
    else:
        check(
            run.returncode == 1 and run.stdout == "",
            f"[{section}] {key} is absent, iniget.sh printed {run.stdout!r} ({run.returncode})",
        )
