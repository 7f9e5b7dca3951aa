"""MCPToolset against mcp-server-time, a real MCP server package from PyPI, over stdio."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any

import pytest
from gem_tool_mcp import MCPTool, MCPToolset

from gem_core.errors import MCPConnectionError
from gem_core.tools import Tool, ToolResult


def by_name(toolset: MCPToolset) -> dict[str, MCPTool]:
    return {tool.name: tool for tool in toolset.tools()}


def call(tool: Tool, **arguments: object) -> ToolResult:
    return asyncio.run(tool.execute(dict(arguments)))


def test_tools_are_listed_as_gem_tools(time_toolset: MCPToolset) -> None:
    tools = by_name(time_toolset)
    assert sorted(tools) == ["convert_time", "get_current_time"]
    current = tools["get_current_time"]
    assert isinstance(current, Tool)
    schema = current.schema()
    assert schema["function"]["name"] == "get_current_time"
    assert schema["function"]["parameters"]["required"] == ["timezone"]
    assert "timezone" in current.description.lower()
    assert current.instructions().startswith("- get_current_time: ")


def test_get_current_time(time_toolset: MCPToolset) -> None:
    result = call(by_name(time_toolset)["get_current_time"], timezone="Asia/Tokyo")
    assert result.ok, result.error
    payload = json.loads(result.output)
    assert payload["timezone"] == "Asia/Tokyo" and payload["datetime"].endswith("+09:00")
    assert result.metadata["structured_content"]["timezone"] == "Asia/Tokyo"
    assert result.metadata["server"] == "time" and result.elapsed_s > 0


def test_convert_time(time_toolset: MCPToolset) -> None:
    result = call(
        by_name(time_toolset)["convert_time"], source_timezone="UTC", time="12:00", target_timezone="Asia/Tokyo"
    )
    assert result.ok, result.error
    assert json.loads(result.output)["target"]["datetime"][11:16] == "21:00"  # Tokyo has no daylight saving


def test_server_error_is_returned_and_session_survives(time_toolset: MCPToolset) -> None:
    tools = by_name(time_toolset)
    bad = call(tools["get_current_time"], timezone="Mars/Olympus_Mons")
    assert not bad.ok and "Mars/Olympus_Mons" in (bad.error or "")
    missing = call(tools["convert_time"], source_timezone="UTC")
    assert not missing.ok
    assert call(tools["get_current_time"], timezone="UTC").ok


def test_one_session_serves_calls_from_many_loops_and_threads(time_toolset: MCPToolset, children_running: Any) -> None:
    tool = by_name(time_toolset)["get_current_time"]
    results: list[ToolResult] = []

    def worker() -> None:
        results.extend(call(tool, timezone="Europe/Paris") for _ in range(3))  # a new event loop per call

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 12 and all(r.ok for r in results)
    assert time_toolset.connections == 1
    assert len(children_running("mcp_server_time")) == 1


def test_concurrent_calls_on_one_loop(time_toolset: MCPToolset) -> None:
    tool = by_name(time_toolset)["get_current_time"]
    zones = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Sydney"] * 3

    async def main() -> list[ToolResult]:
        return await asyncio.gather(*(tool.execute({"timezone": z}) for z in zones))

    results = asyncio.run(main())
    assert [json.loads(r.output)["timezone"] for r in results] == zones


def test_closing_every_tool_stops_the_server(children_running: Any) -> None:
    toolset = MCPToolset(command=sys.executable, args=["-m", "mcp_server_time"], name="t2", server_stderr="discard")
    before = set(children_running("mcp_server_time"))
    tools = toolset.tools()
    assert len(set(children_running("mcp_server_time")) - before) == 1

    async def close_all() -> None:
        for tool in tools:
            await tool.aclose()

    asyncio.run(close_all())
    assert set(children_running("mcp_server_time")) == before
    after = call(tools[0], timezone="UTC")
    assert not after.ok and "closed" in (after.error or "")
    toolset.close()  # idempotent


def test_missing_executable_is_a_connection_error() -> None:
    toolset = MCPToolset(command="/nonexistent/mcp-server", connect_timeout_s=10)
    with pytest.raises(MCPConnectionError, match=r"cannot connect to MCP server 'mcp'.*nonexistent"):
        toolset.tools()
    result = asyncio.run(toolset.call("anything", {}))
    assert not result.ok and "cannot connect" in (result.error or "")
    toolset.close()
