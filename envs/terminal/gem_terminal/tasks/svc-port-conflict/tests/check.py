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


def probe_output() -> str:
    """What the probe (tests/gem-probe.sh) saw while the agent's processes ran.

    gem runs it before it ends the agent and hands its output over in ``/tests/gem-probe.out``; under
    Harbor the agent's processes still run at verification, so it runs now.
    """
    if os.path.exists("/tests/gem-probe.out"):
        with open("/tests/gem-probe.out") as fh:
            return fh.read()
    run = subprocess.run(["bash", "/tests/gem-probe.sh"], capture_output=True, text=True, timeout=60)
    return f"{run.stdout}[exit code] {run.returncode}\n"


def check_probe() -> None:
    """The probe printed ``probe ok`` last and exited 0."""
    lines = probe_output().strip().splitlines()
    check(
        lines[-2:] == ["probe ok", "[exit code] 0"],
        "the probe of the running service failed: " + " | ".join(lines[-6:]),
    )


for name in ("api.py", "backend.py"):
    with open(f"/app/svc/{name}") as now, open(f"/tests/{name}") as given:
        check(now.read() == given.read(), f"{name} was changed")
check_probe()
