"""Programs that play the reward hacker, for tests that the sandbox keeps graders' data unreadable.

:func:`snoop_program` writes a program that looks everywhere a solution could look for the
expected answers: every readable file (by name and content), its environment, every process's
command line and environment (``/proc/1/cmdline`` names the worker script, whose folder leads
to the installed packages), and the folders those command lines name. It prints a JSON list
of where it found any of the needles. Dataset envs' tests run it as a "solution".
"""

from __future__ import annotations

__all__ = ["snoop_program"]

_SNOOP = r"""
import json, os, sys
needles = [n.encode() for n in NEEDLES]
hits, seen = [], [0]
TEXTUAL = {"", ".jsonl", ".json", ".txt", ".csv", ".tsv", ".py", ".parquet", ".arrow", ".yaml", ".md", ".gz"}

def check(where, data):
    for needle in needles:
        if needle in data:
            hits.append(where)
            return

def scan_file(path):
    if seen[0] > 20000:
        return
    seen[0] += 1
    check("name:" + path, path.encode("utf-8", "replace"))
    if os.path.splitext(path)[1] not in TEXTUAL:  # data files, not shared libraries
        return
    try:
        with open(path, "rb") as handle:
            check(path, handle.read(8 << 20))
    except OSError:
        pass

def walk(top):
    for folder, dirs, files in os.walk(top, onerror=lambda e: None):
        if folder == "/" :
            dirs[:] = [d for d in dirs if d not in ("proc", "sys")]
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
for folder in list(named) + [os.path.dirname(os.path.dirname(p)) for p in named] + sys.path:
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
