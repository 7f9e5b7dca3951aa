"""MCP tool call latency: one kept-open session (gem_tool_mcp) vs a new session per call (GEM's way).

Run: ``python bench/mcp_session.py [--calls 200]`` (needs ``pip install -e . -e 'plugins/mcp[test]'``).

GEM's ``MCPTool`` runs every call as ``asyncio.run`` around ``async with fastmcp.Client(...)``:
a new event loop, transport and initialize handshake per call, and for a stdio server a new
server process. ``gem-llm[mcp]`` pins the fastmcp/mcp 1.x stack, which cannot share a venv with
mcp 2.x, so the per-call pattern is reproduced here with the same SDK (``mcp.Client``), on the
same servers: the suite's MCPServer over streamable HTTP on 127.0.0.1, and mcp-server-time
(PyPI) over stdio. Medians of per-call wall time; ratios are per-call / kept-open. The "floor" row is the SDK called
directly inside one session, so kept-open minus floor is gem_tool_mcp's own overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gem_tool_mcp import MCPToolset
from mcp import Client, StdioServerParameters

SERVER = Path(__file__).resolve().parents[1] / "plugins" / "mcp" / "tests" / "http_server.py"
TIME_SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


def start_http_server() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(SERVER), str(port)], stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("MCP test server did not start")


def kept_open(toolset: MCPToolset, tool: str, args: dict[str, Any], calls: int) -> list[float]:
    target = {t.name: t for t in toolset.tools()}[tool]
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        result = asyncio.run(target.execute(args))  # a new caller loop each call, as a sync env step would
        assert result.ok, result.error
        times.append(time.perf_counter() - start)
    return times


def per_call_session(server: Any, tool: str, args: dict[str, Any], calls: int) -> list[float]:
    async def once() -> None:
        async with Client(server) as client:
            result = await client.call_tool(tool, args)
            assert not result.is_error

    times = []
    for _ in range(calls):
        start = time.perf_counter()
        asyncio.run(once())
        times.append(time.perf_counter() - start)
    return times


def sdk_one_session(server: Any, tool: str, args: dict[str, Any], calls: int) -> list[float]:
    """The floor: the SDK alone, one session, called from its own loop (no forwarding)."""

    async def run() -> list[float]:
        times = []
        async with Client(server) as client:
            for _ in range(calls):
                start = time.perf_counter()
                await client.call_tool(tool, args)
                times.append(time.perf_counter() - start)
        return times

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per HTTP measurement")
    parser.add_argument("--stdio-calls", type=int, default=5, help="per-call stdio sessions (each starts a server)")
    args = parser.parse_args()
    rows = []

    proc, url = start_http_server()
    try:
        with MCPToolset.http(url) as toolset:
            ours = statistics.median(kept_open(toolset, "add", {"a": 1, "b": 2}, args.calls))
        floor = statistics.median(sdk_one_session(url, "add", {"a": 1, "b": 2}, args.calls))
        theirs = statistics.median(per_call_session(url, "add", {"a": 1, "b": 2}, args.calls))
        rows.append(("HTTP, SDK alone in one session (floor)", floor, None))
        rows.append(("HTTP, kept-open session", ours, None))
        rows.append(("HTTP, new session per call", theirs, theirs / ours))
    finally:
        proc.terminate()
        proc.wait(10)

    params = StdioServerParameters(command=TIME_SERVER[0], args=TIME_SERVER[1:])
    with MCPToolset.stdio(TIME_SERVER[0], TIME_SERVER[1:], server_stderr="discard") as toolset:
        ours = statistics.median(kept_open(toolset, "get_current_time", {"timezone": "UTC"}, args.calls))
    theirs = statistics.median(per_call_session(params, "get_current_time", {"timezone": "UTC"}, args.stdio_calls))
    rows.append(("stdio mcp-server-time, kept-open session", ours, None))
    rows.append(("stdio mcp-server-time, new session per call", theirs, theirs / ours))

    width = max(len(r[0]) for r in rows)
    print(f"{'per tool call (median)':<{width}}  latency     calls/s   slower")
    for name, seconds, ratio in rows:
        slower = f"{ratio:,.0f}x" if ratio else ""
        print(f"{name:<{width}}  {seconds * 1e3:8.1f} ms  {1 / seconds:8.1f}  {slower}")


if __name__ == "__main__":
    main()
