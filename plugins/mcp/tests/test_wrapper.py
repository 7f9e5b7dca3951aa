"""MCP tools inside ToolEnvWrapper: a scripted agent asks mcp-server-time, then answers."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from gem_tool_mcp import MCPToolset

from gem_core.testing import GenericTestEnv
from gem_core.tools import ToolEnvWrapper


def offset_env() -> GenericTestEnv:
    """Asks for Tokyo's UTC offset; the answer is graded on the last <answer> tag."""

    def reset(env: GenericTestEnv, seed: int | None, options: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
        return "What is the UTC offset of Asia/Tokyo right now? Answer in <answer></answer>.", {}

    def step(env: GenericTestEnv, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        found = re.findall(r"<answer>(.*?)</answer>", action)
        correct = bool(found) and found[-1] == "+09:00"
        return "", float(correct), True, False, {"success": correct}

    return GenericTestEnv(reset_func=reset, step_func=step)


def test_agent_calls_mcp_tool_through_the_wrapper(time_toolset: MCPToolset) -> None:
    env = ToolEnvWrapper(offset_env(), tools=time_toolset.tools(), syntax="json")
    obs, info = env.reset(seed=0)
    assert {t["function"]["name"] for t in info["tools"]} == {"get_current_time", "convert_time"}
    assert '"name": "get_current_time"' in obs
    call = {"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}
    obs, reward, terminated, _, info = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    assert not terminated and info["tool_results"][0]["ok"]
    response = re.search(r"<tool_response[^>]*>\n(.*?)\n</tool_response>", obs, re.S)
    assert response is not None
    offset = json.loads(response.group(1))["datetime"][-6:]
    obs, reward, terminated, _, info = env.step(f"<answer>{offset}</answer>")
    assert terminated and reward == 1.0
    bad = {"name": "get_current_time", "arguments": {"timezone": "Nowhere/Land"}}
    env.reset(seed=1)
    obs, _, _, _, info = env.step(f"<tool_call>{json.dumps(bad)}</tool_call>")
    assert not info["tool_results"][0]["ok"] and "[error]" in obs and "Nowhere/Land" in obs
    env.close()  # the toolset belongs to the fixture: the wrapper leaves it open
    assert asyncio.run(time_toolset.call("get_current_time", {"timezone": "UTC"})).ok
