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

nasty = ["&", "\\", "/", "\\1", "$1", "$HOME", "'", '"', "{{x}}", "=", "%s", "|", "\\n", "*", "."]
keys = [f"{RNG.choice(['k', 'name', 'v_', 'X'])}{RNG.randrange(10**5)}" for _ in range(RNG.randrange(3, 8))]
values = {k: "".join(RNG.choice(nasty + list("ab c")) for _ in range(RNG.randrange(0, 8))) for k in keys}
missing = f"absent{RNG.randrange(10**5)}"
pieces = []
for _ in range(RNG.randrange(10, 30)):
    key = RNG.choice(keys + [missing])
    pieces.append(
        RNG.choice(["text ", "\n", "a{b} ", "{ {x} } ", "$y "])
        + "{{"
        + " " * RNG.randrange(2)
        + key
        + " " * RNG.randrange(2)
        + "}}"
    )
template = "".join(pieces) + "\n"
variables = "# settings\n\n" + "".join(f"{k}={v}\n" for k, v in values.items())
want = re.sub(r"\{\{ *(\w+) *\}\}", lambda m: values.get(m.group(1), m.group(0)), template)
folder = scratch()
for name, text in (("t.tmpl", template), ("v.vars", variables)):
    with open(os.path.join(folder, name), "w") as fh:
        fh.write(text)
    os.chmod(os.path.join(folder, name), 0o644)
run = agent(["bash", "/app/render.sh", f"{folder}/t.tmpl", f"{folder}/v.vars"], cwd=folder)
check(run.returncode == 0, f"render.sh failed: {run.stderr[-500:]}")
check(run.stdout == want, f"render.sh printed {run.stdout[:200]!r}, wanted {want[:200]!r}")
