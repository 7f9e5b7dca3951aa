"""MCPToolset against the suite's MCPServer over streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from gem_tool_mcp import MCPTool, MCPToolset

from gem_core.errors import ConfigError, MCPConnectionError
from gem_core.tools import ToolResult


@pytest.fixture(scope="module")
def toolset(http_url: str) -> MCPToolset:
    ts = MCPToolset.http(http_url, name="test", call_timeout_s=30.0, headers={"X-Test": "1"})
    yield ts
    ts.close()


def tools_of(toolset: MCPToolset) -> dict[str, MCPTool]:
    return {tool.name: tool for tool in toolset.tools()}


def run(coro: object) -> ToolResult:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_tools_and_schemas(toolset: MCPToolset) -> None:
    tools = tools_of(toolset)
    assert sorted(tools) == ["add", "crash", "echo", "fail", "sleep", "stats"]
    params = tools["add"].parameters
    assert params["type"] == "object" and set(params["required"]) == {"a", "b"}
    assert tools["add"].description == "Add two integers."


def test_call_returns_text_and_structured_content(toolset: MCPToolset) -> None:
    result = run(tools_of(toolset)["add"].execute({"a": 2, "b": 40}))
    assert result.ok and result.output == "42" and result.metadata["structured_content"] == {"result": 42}


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("fail", {"message": "disk on fire"}, "disk on fire"),
        ("add", {"a": "two", "b": 1}, "valid integer"),
        ("add", {"a": 1}, "b"),
    ],
    ids=["tool-raises", "bad-type", "missing-argument"],
)
def test_errors_are_returned_to_the_model(toolset: MCPToolset, tool: str, arguments: dict, message: str) -> None:
    result = run(tools_of(toolset)[tool].execute(arguments))
    assert not result.ok and message in (result.error or "")


def test_unknown_tool_is_an_error(toolset: MCPToolset) -> None:
    result = run(toolset.call("does_not_exist", {}))
    assert not result.ok and "does_not_exist" in (result.error or "")


def test_timeout_is_an_error_and_the_session_is_replaced(toolset: MCPToolset) -> None:
    connections = toolset.connections
    result = run(toolset.call("sleep", {"seconds": 10}, timeout_s=0.5))
    assert not result.ok and result.error == "sleep timed out after 0.5 s"
    assert run(tools_of(toolset)["echo"].execute({"text": "still here"})).output == "still here"
    assert toolset.connections == connections + 1  # the abandoned call's session is never reused


def test_concurrent_calls_share_the_session(toolset: MCPToolset) -> None:
    add = tools_of(toolset)["add"]
    before = json.loads(run(tools_of(toolset)["stats"].execute({})).output)["calls"]
    connections = toolset.connections

    async def main() -> list[ToolResult]:
        return await asyncio.gather(*(add.execute({"a": i, "b": i}) for i in range(20)))

    results = asyncio.run(main())
    assert [r.output for r in results] == [str(2 * i) for i in range(20)]
    after = json.loads(run(tools_of(toolset)["stats"].execute({})).output)["calls"]
    assert after - before == 20 and toolset.connections == connections


def test_include_exclude_and_prefix(http_url: str) -> None:
    with MCPToolset.http(http_url, include=["add", "echo"], exclude=["echo"], name_prefix="calc_") as ts:
        tools = ts.tools()
        assert [t.name for t in tools] == ["calc_add"]
        assert run(tools[0].execute({"a": 1, "b": 1})).output == "2"
    with MCPToolset.http(http_url, include=["multiply"]) as ts, pytest.raises(MCPConnectionError, match="no tools"):
        ts.tools()


def test_async_use_with_context_manager(http_url: str) -> None:
    async def main() -> str:
        async with MCPToolset.http(http_url) as ts:
            tools = {t.name: t for t in await ts.atools()}
            return (await tools["echo"].execute({"text": "hi"})).output

    assert asyncio.run(main()) == "hi"


def test_unreachable_server_is_a_connection_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ts = MCPToolset.http(f"http://127.0.0.1:{port}/mcp", connect_timeout_s=10)
    with pytest.raises(MCPConnectionError, match=f"127.0.0.1:{port}"):
        ts.tools()
    ts.close()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "exactly one of command"),
        ({"command": "x", "url": "http://h/mcp"}, "exactly one of command"),
        ({"url": "ws://h/mcp"}, "must start with http"),
        ({"command": "x", "headers": {"a": "b"}}, "headers are for url"),
        ({"command": "x", "call_timeout_s": 0}, "call_timeout_s"),
        ({"command": "x", "colour": "red"}, "colour"),
    ],
    ids=["neither", "both", "bad-scheme", "headers-on-stdio", "zero-timeout", "unknown-field"],
)
def test_bad_config_names_the_field(fields: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MCPToolset(**fields)
