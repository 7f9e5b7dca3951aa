"""Code run through the python tool cannot find the expected answers on the filesystem or in the environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gem_tool_python import PythonTool
from gem_tool_python.probes import SNOOP_TIMEOUT_S, snoop_program

import gem_core
import gem_math
from gem_core.tools import ToolEnvWrapper

SAMPLES = Path(gem_math.__file__).with_name("samples") / "math.jsonl"


def test_snooping_tool_call_finds_no_answers() -> None:
    tool = PythonTool(timeout_s=SNOOP_TIMEOUT_S, cpu_s=int(SNOOP_TIMEOUT_S), pool_size=1)
    if tool.pool.start().isolation != "namespaces":
        tool.close()
        pytest.skip(f"only namespace mode hides the graders' data; this machine gives {tool.pool.isolation!r}")
    env = ToolEnvWrapper(gem_core.make("math:Sample-v0"), [tool])
    try:
        obs, _ = env.reset(seed=0)
        row = next(json.loads(line) for line in SAMPLES.read_text().splitlines() if json.loads(line)["problem"] in obs)
        obs, *_ = env.step(f"<python>{snoop_program([row['problem'], SAMPLES.name])}</python>")
        assert "\n[]\n" in obs, obs
    finally:
        env.close()
        tool.close()
