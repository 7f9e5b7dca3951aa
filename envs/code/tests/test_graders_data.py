"""A "solution" that searches the filesystem and environment cannot find the expected outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gem_tool_python.probes import SNOOP_TIMEOUT_S, snoop_program

import gem_code
import gem_core

SAMPLES = Path(gem_code.__file__).with_name("samples") / "code.jsonl"


def test_snooping_solution_finds_no_tests_and_scores_zero() -> None:
    env = gem_core.make(
        "code:Sample-v0",
        max_tests=1,
        timeout_s=SNOOP_TIMEOUT_S,
        sandbox={"cpu_s": int(SNOOP_TIMEOUT_S), "pool_size": 1},
    )
    try:
        if env.pool.start().isolation != "namespaces":
            pytest.skip(f"only namespace mode hides the graders' data; this machine gives {env.pool.isolation!r}")
        obs, _ = env.reset(seed=0)
        row = next(json.loads(line) for line in SAMPLES.read_text().splitlines() if json.loads(line)["problem"] in obs)
        needles = [row["problem"], SAMPLES.name, *row["tests"]["outputs"][-1:]]
        # The attack from the issue: /proc/1/cmdline -> install folder -> samples/code.jsonl.
        found = env.pool.run(snoop_program([row["problem"], SAMPLES.name]))
        assert (found.status, json.loads(found.stdout)) == ("ok", []), found
        _, reward, *_ = env.step(f"```python\n{snoop_program(needles)}\n```")
        assert reward == 0.0
    finally:
        env.close()
