"""Programs that play the reward hacker, for tests that the sandbox keeps graders' data unreadable.

:func:`snoop_program` writes a program that looks everywhere a solution could look for the
expected answers: every readable file (by name and content), its environment, every process's
command line and environment (``/proc/1/cmdline`` names the worker script, whose folder leads
to the installed packages), and the folders those command lines name. It prints a JSON list
of where it found any of the needles. Dataset envs' tests run it as a "solution".
"""

from __future__ import annotations

__all__ = ["SNOOP_TIMEOUT_S", "snoop_program"]

#: The wall-clock and CPU budget to give :func:`snoop_program`'s run. It reads the name of every file the
#: sandbox shows (a checkout with its tox envs: tens of thousands) and the content of every data file: 15 to
#: 30 s on a quiet 2-core machine, past 60 s when three tox envs ran beside it. A tighter bound turns the
#: test into a timeout, whose observation holds no answer either, so it would prove nothing.
SNOOP_TIMEOUT_S = 600.0

_SNOOP = r"""
import json, os, sys
needles = [n.encode() for n in NEEDLES]
hits, done = [], set()
DATA = {".jsonl", ".json", ".txt", ".csv", ".tsv", ".parquet", ".arrow", ".yaml", ".gz", ".pkl", ".npy"}

def check(where, data):
    for needle in needles:
        if needle in data:
            hits.append(where)
            return

def scan_file(path):
    if path in done:
        return
    done.add(path)
    check("name:" + path, path.encode("utf-8", "replace"))
    if os.path.splitext(path)[1] not in DATA:  # data files, not code and shared libraries
        return
    try:
        with open(path, "rb") as handle:
            check(path, handle.read(8 << 20))
    except OSError:
        pass

def walk(top):
    for folder, dirs, files in os.walk(top, onerror=lambda e: None):
        if folder == "/" :
            dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
        for name in files:
            scan_file(os.path.join(folder, name))

check("environ", json.dumps(dict(os.environ)).encode())
named = set()
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for part in ("cmdline", "environ"):
            try:
                data = open(f"/proc/{pid}/{part}", "rb").read()
            except OSError:
                continue
            check(f"/proc/{pid}/{part}", data)
            for arg in data.split(b"\0"):
                if arg.startswith(b"/"):
                    named.add(os.path.dirname(arg.decode("utf-8", "replace")))
ancestors = set()
for path in named:  # the issue's attack: from the worker script up to the install (or source) folder
    for _ in range(3):
        path = os.path.dirname(path)
        ancestors.add(path)
for folder in sorted(named) + sorted(ancestors) + sys.path:
    if folder and os.path.isdir(folder):
        walk(folder)
walk("/")
print(json.dumps(sorted(set(hits))))
"""


def snoop_program(needles: list[str]) -> str:
    """A program that prints a JSON list of the places where it found any of ``needles``.

    Args:
        needles: Distinctive strings of the graders' data (an expected answer, a problem's text).
    """
    return f"NEEDLES = {needles!r}\n{_SNOOP}"
