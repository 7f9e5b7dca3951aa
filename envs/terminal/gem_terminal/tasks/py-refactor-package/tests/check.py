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


import ast
import importlib.util

check(not os.path.exists("/app/shop.py"), "/app/shop.py is still there")


def defines(path: str, kind: type, name: str) -> bool:
    """Whether the file defines ``name`` at top level (read, not run)."""
    try:
        with open(path) as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError):
        return False
    return any(isinstance(node, kind) and node.name == name for node in tree.body)


check(defines("/app/shop/models.py", ast.ClassDef, "Item"), "shop/models.py does not define Item")
check(defines("/app/shop/pricing.py", ast.FunctionDef, "total"), "shop/pricing.py does not define total")
check(os.path.isfile("/app/shop/__init__.py"), "shop/__init__.py is missing")

# The original module (this checker's copy) answers here; the agent's package answers as the agent.
spec = importlib.util.spec_from_file_location("original_shop", "/tests/original_shop.py")
original = importlib.util.module_from_spec(spec)
sys.modules["original_shop"] = original
spec.loader.exec_module(original)
coupons = [None, "", "SAVE10", "BULK", "FREESHIP", "FLAT5", "FLAT0", "FLAT999", "FLATx", "save10"]
carts = []
for _ in range(60):
    items = [
        [f"i{n}", RNG.choice([0, 1, 99, 250, RNG.randrange(1, 4000)]), RNG.randrange(1, 8)]
        for n in range(RNG.randrange(0, 6))
    ]
    carts.append([items, RNG.choice(coupons)])
want = [original.total([original.Item(*i) for i in items], coupon) for items, coupon in carts]
program = (
    "import json, sys\nsys.path.insert(0, '/app')\nfrom shop import Item, total\nimport shop.models, shop.pricing\n"
    "assert Item is shop.models.Item and total is shop.pricing.total\n"
    "print(json.dumps([total([Item(*i) for i in items], coupon) for items, coupon in json.load(sys.stdin)]))\n"
)
run = agent(["python3", "-I", "-c", program], json.dumps(carts), cwd=scratch())
check(run.returncode == 0, f"the package failed: {run.stderr[-500:]}")
got = json.loads(run.stdout.splitlines()[-1])
for cart, answer, expected in zip(carts, got, want):
    check(answer == expected, f"total{tuple(cart)} is {answer}, was {expected}")
