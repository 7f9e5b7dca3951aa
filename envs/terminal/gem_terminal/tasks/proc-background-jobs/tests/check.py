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


folder = scratch()
first, second = RNG.randrange(0, 120), RNG.randrange(1, 120)
token, word = f"t{RNG.randrange(10**6)}", f"w {RNG.randrange(10**6)}"
# Played as the agent: a job that ends, a job held by a fifo until the checker feeds it, odd arguments.
script = f'''
cd {folder}
export JOBS_DIR={folder}/jobs
mkfifo gate
exec 3<>gate  # read-write: neither the job's read nor the feed below blocks on opening it
bash /app/bg.sh start one sh -c 'echo out1; echo "$0"; echo err1 >&2; exit {first}' "{word}"
bash /app/bg.sh start held sh -c 'read x < {folder}/gate; echo "got $x"; exit {second}'
bash /app/bg.sh start args printf '%s|' "a b" "" '$HOME' "{word}"
bash /app/bg.sh wait one 20; echo "status $?"
bash /app/bg.sh wait held 1; echo "status $?"
echo {token} >&3
bash /app/bg.sh wait held 20; echo "status $?"
bash /app/bg.sh wait args 20; echo "status $?"
for f in one.out one.err one.rc held.out held.rc args.out; do printf '%s=%s\\n' $f "$(cat jobs/$f)"; done
'''
run = agent(["bash", "-c", script], timeout=45)
want = [
    f"one exited {first}",
    f"status {first}",
    "held running",
    "status 124",
    f"held exited {second}",
    f"status {second}",
    "args exited 0",
    "status 0",
    "one.out=out1",
    word,
    "one.err=err1",
    f"one.rc={first}",
    f"held.out=got {token}",
    f"held.rc={second}",
    f"args.out=a b||$HOME|{word}|",
]
check(run.stdout.splitlines() == want, f"bg.sh gave {run.stdout.splitlines()}, wanted {want} ({run.stderr[-300:]})")
