"""A stdio server that dies is reported to the model, then restarted on the next call."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from gem_tool_mcp import MCPToolset


def test_crashed_server_is_restarted_on_next_call(test_server_script: Path) -> None:
    with MCPToolset.stdio(
        sys.executable, [str(test_server_script), "stdio"], name="crashy", server_stderr="discard"
    ) as ts:
        tools = {t.name: t for t in ts.tools()}
        first_pid = json.loads(asyncio.run(tools["stats"].execute({})).output)["pid"]
        crashed = asyncio.run(tools["crash"].execute({}))
        assert not crashed.ok and "connection lost" in (crashed.error or "")
        again = asyncio.run(tools["stats"].execute({}))
        assert again.ok, again.error
        assert json.loads(again.output)["pid"] != first_pid
        assert ts.connections == 2
