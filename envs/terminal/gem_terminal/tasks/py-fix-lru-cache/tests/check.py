"""The task's hidden checker (run by tests/test.sh): exit 0 when the task is solved, else print why and exit 1."""

from __future__ import annotations

import json
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


from collections import OrderedDict


class Model:
    """The contract, as this checker reads it."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.data = capacity, OrderedDict()

    def get(self, key: int, default: object = None) -> object:
        if key not in self.data:
            return default
        self.data.move_to_end(key)
        return self.data[key]

    def put(self, key: int, value: object) -> None:
        if self.capacity <= 0:
            return
        if key in self.data:
            self.data.move_to_end(key)
        elif len(self.data) >= self.capacity:
            self.data.popitem(last=False)
        self.data[key] = value


# Random schedules of operations, replayed by the agent's class (as the agent) and by the model here.
schedules = []
for _ in range(25):
    capacity = RNG.choice([0, 1, 2, 3, RNG.randrange(4, 9)])
    ops = []
    for _ in range(RNG.randrange(5, 40)):
        key = RNG.randrange(6)
        ops.append(RNG.choice([["put", key, RNG.randrange(100)], ["get", key], ["get", key, "d"], ["len"], ["keys"]]))
    schedules.append([capacity, ops])
program = """import json, sys
sys.path.insert(0, "/app")
from lru import LRUCache
out = []
for capacity, ops in json.load(sys.stdin):
    cache, answers = LRUCache(capacity), []
    for op in ops:
        if op[0] == "put":
            answers.append(cache.put(op[1], op[2]))
        elif op[0] == "get":
            answers.append(cache.get(*op[1:]))
        elif op[0] == "len":
            answers.append(len(cache))
        else:
            answers.append(list(cache.keys()))
    out.append(answers)
print(json.dumps(out))
"""
run = agent(["python3", "-I", "-c", program], json.dumps(schedules), cwd=scratch())
check(run.returncode == 0, f"LRUCache failed: {run.stderr[-500:]}")
got = json.loads(run.stdout.splitlines()[-1])
for (capacity, ops), answers in zip(schedules, got):
    check(len(answers) == len(ops), f"capacity {capacity}: {len(answers)} answers to {len(ops)} operations")
    model = Model(capacity)
    for step, (op, answer) in enumerate(zip(ops, answers)):
        if op[0] == "put":
            want = model.put(op[1], op[2])
        elif op[0] == "get":
            want = model.get(*op[1:])
        elif op[0] == "len":
            want = len(model.data)
        else:
            want = list(model.data)
        check(answer == want, f"capacity {capacity}, after {ops[:step]}: {op} gave {answer}, not {want}")
check(len(got) == len(schedules), "LRUCache did not answer every schedule")
