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


import time

# A project drawn now (how many parts, what each returns), built by the agent's script as the agent.
project = os.path.join(scratch(), "proj")
os.mkdir(project)
os.chmod(project, 0o777)
parts = {f"part{i}_{RNG.randrange(10**6)}": RNG.randrange(1000) for i in range(RNG.randrange(2, 6))}
#: Files of the first build are dated in the past; a later edit a little in the future, so that it is
#: newer than every object built before it whatever the file system's time granularity.
past = [True]


def write(relative: str, text: str) -> None:
    """Write a project file, dated as above."""
    path = os.path.join(project, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.chmod(os.path.dirname(path), 0o777)
    with open(path, "w") as fh:
        fh.write(text)
    os.chmod(path, 0o666)
    when = time.time() + (-1000 if past[0] else 2)
    os.utime(path, (when, when))


def build(compiled: set[str], total: int | None) -> None:
    """Run build.sh; it must print exactly the ``compiled`` lines, then the program must print ``total``."""
    run = agent(["bash", "/app/build.sh", project], timeout=120)
    check(run.returncode == 0, f"build.sh failed: {(run.stdout + run.stderr)[-500:]}")
    lines = sorted(run.stdout.splitlines())
    check(lines == sorted(f"compiled {n}.c" for n in compiled), f"build.sh printed {lines}, wanted {sorted(compiled)}")
    past[0] = False
    app = agent([os.path.join(project, "bin", "app")])
    check(
        app.returncode == 0 and app.stdout.strip() == str(total), f"bin/app printed {app.stdout.strip()!r}, not {total}"
    )


header = "".join(f"int {name}(void);\n" for name in parts) + f"#define BONUS {RNG.randrange(100)}\n"
write("include/parts.h", header)
for name, value in parts.items():
    write(f"src/{name}.c", f'#include "parts.h"\n\nint {name}(void) {{ return {value}; }}\n')
calls = " + ".join(f"{name}()" for name in parts)
write(
    "src/main.c",
    f'#include <stdio.h>\n#include "parts.h"\n\nint main(void) {{ printf("%d\\n", {calls} + BONUS); return 0; }}\n',
)
bonus = int(header.rsplit(" ", 1)[1])
everything = {*parts, "main"}
build(everything, sum(parts.values()) + bonus)
build(set(), sum(parts.values()) + bonus)
changed = RNG.choice(sorted(parts))
parts[changed] = RNG.randrange(1000, 2000)
write(f"src/{changed}.c", f'#include "parts.h"\n\nint {changed}(void) {{ return {parts[changed]}; }}\n')
build({changed}, sum(parts.values()) + bonus)
bonus = RNG.randrange(100, 200)
write("include/parts.h", "".join(f"int {name}(void);\n" for name in parts) + f"#define BONUS {bonus}\n")
build(everything, sum(parts.values()) + bonus)
broken = RNG.choice(sorted(parts))
write(f"src/{broken}.c", f"int {broken}(void) {{ return }}\n")
run = agent(["bash", "/app/build.sh", project], timeout=120)
check(run.returncode != 0, "build.sh exited 0 after a failed compile")
check(run.stdout.splitlines()[-1:] == [f"failed {broken}.c"], f"build.sh printed {run.stdout.splitlines()[-3:]}")
