"""A small MCP server for the tests, served over streamable HTTP on 127.0.0.1 (or stdio).

Run as ``python http_server.py PORT`` (HTTP) or ``python http_server.py stdio``.
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("gem-test-server", log_level="WARNING")
calls = {"n": 0}


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> int:
    calls["n"] += 1
    return a + b


@server.tool(description="Return the text unchanged.")
def echo(text: str) -> str:
    calls["n"] += 1
    return text


@server.tool(description="Sleep for some seconds, then answer.")
async def sleep(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool(description="Always fails with the given message.")
def fail(message: str) -> str:
    raise ToolError(message)


@server.tool(description="The server's process id and how many add/echo calls it served.")
def stats() -> dict[str, int]:
    return {"pid": os.getpid(), "calls": calls["n"]}


@server.tool(description="Exit the server process abruptly.")
def crash() -> str:
    os._exit(3)


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
