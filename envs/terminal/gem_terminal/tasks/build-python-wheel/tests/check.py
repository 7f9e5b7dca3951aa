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


import configparser
import glob
import re
import zipfile
from collections import Counter

wheels = glob.glob("/app/dist/*.whl")
check(len(wheels) == 1, f"/app/dist holds {len(wheels)} wheels")
# Installing a wheel runs none of its code: unpack it where the agent's program will import it from.
target = scratch()
with zipfile.ZipFile(wheels[0]) as wheel:
    names = wheel.namelist()
    check("tally/cli.py" in names and "tally/data/stopwords.txt" in names, f"the wheel holds {sorted(names)[:12]}")
    wheel.extractall(target)
points = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
check(len(points) == 1, "the wheel has no entry points")
parser = configparser.ConfigParser()
parser.read(os.path.join(target, points[0]))
check(parser.has_option("console_scripts", "tally"), "the wheel declares no tally command")
entry = parser.get("console_scripts", "tally").replace(" ", "")
module, _, function = entry.partition(":")
check(re.fullmatch(r"[\w.]+", module) and re.fullmatch(r"\w+", function), f"tally = {entry}")
for root, dirs, files in os.walk(target):
    for name in dirs + files:
        os.chmod(os.path.join(root, name), 0o777)

# The command as an installer would write it, run as the agent on text drawn now.
with open("/tests/stopwords.txt") as fh:
    skip = set(fh.read().split())
vocabulary = sorted(skip) + ["".join(RNG.choice("abcdefgh") for _ in range(RNG.randrange(1, 5))) for _ in range(12)]
words = [RNG.choice(vocabulary) for _ in range(RNG.randrange(30, 80))]
text = " ".join(w.upper() if RNG.random() < 0.2 else w for w in words) + ", 42 end-of-text.\n"
counts = Counter(w for w in re.findall(r"[a-z]+", text.lower()) if w not in skip)
want = [f"{c} {w}" for w, c in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]
program = f"import sys; sys.path.insert(0, {target!r}); from {module} import {function}; sys.exit({function}())"
run = agent(["python3", "-I", "-c", program], text, cwd=target)
check(run.returncode == 0, f"tally failed: {run.stderr[-500:]}")
check(run.stdout.splitlines() == want, f"tally printed {run.stdout.splitlines()[:5]}, not {want[:5]}")
