"""Any model arguments to an MCP tool: the call fails alone, the shared session and calls in flight carry on."""

from __future__ import annotations

import asyncio
from typing import Any

from gem_tool_mcp import MCPToolset
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.testing import GenericTestEnv
from gem_core.tools import ToolEnvWrapper
from gem_core.tools.fuzz import any_text, model_text


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):  # built iteratively: far deeper than the recursion limit
        value = {"a": value}
    return value


def test_bad_arguments_fail_alone_while_good_calls_in_flight_succeed(time_toolset: MCPToolset) -> None:
    before = time_toolset.connections
    time_toolset.tools()

    async def mixed() -> list[bool]:
        good = {"timezone": "UTC"}
        bad: list[dict[str, Any]] = [
            {"timezone": "\ud800"},
            {"timezone": nested(5_000)},
            {"timezone": float("nan")},
            {"timezone": 10**5_000},
        ]
        calls = [time_toolset.call("get_current_time", args) for args in [good, *bad, good]]
        return [result.ok for result in await asyncio.gather(*calls)]

    assert asyncio.run(mixed()) == [True, False, False, False, False, True]
    assert time_toolset.connections - before <= 1  # no call dropped the session


@settings(max_examples=40, deadline=None)
@given(arguments=st.dictionaries(any_text(10), st.sampled_from([{"x": "\udfff"}, "\ud800", [[[]]], 1.5, None])))
def test_call_never_raises_on_any_arguments(time_toolset: MCPToolset, arguments: dict[str, Any]) -> None:
    result = asyncio.run(time_toolset.call("get_current_time", arguments))
    (result.output + (result.error or "")).encode("utf-8")


@settings(max_examples=30, deadline=None)
@given(text=model_text(["get_current_time"], arguments=("timezone",)))
def test_step_never_raises_on_any_text(time_toolset: MCPToolset, text: str) -> None:
    env = ToolEnvWrapper(GenericTestEnv(), time_toolset.tools(), max_tool_calls=100)
    env.reset(seed=0)
    obs, *_, info = env.step(text)
    if info["tool_calls"]:  # a tool step's observation (the inner env's own echo is its business)
        obs.encode("utf-8")
