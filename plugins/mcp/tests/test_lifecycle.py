"""Servers that misbehave at start or at shutdown: close() never raises and leaves no process behind."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from gem_tool_mcp import MCPToolset

from gem_core.errors import MCPConnectionError

Running = Callable[[str], list[int]]

# A child in the server's process group that ignores SIGTERM: only SIGKILL to the group stops it.
STUBBORN_CHILD = (
    "import signal, subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', "
    "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)', '{marker}'])\n"
)


def gone(children_running: Running, marker: str) -> bool:
    for _ in range(100):  # killed processes are reaped by their parents a moment later
        if not children_running(marker):
            return True
        time.sleep(0.05)
    return False


def descendants_gone(marker: str) -> bool:
    """No process anywhere (children of children included) has ``marker`` in its command line."""
    for _ in range(100):
        alive = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    cmdline = (entry / "cmdline").read_bytes()
                    state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                except OSError:
                    continue
                if marker.encode() in cmdline and state != "Z":
                    alive.append(entry.name)
        if not alive:
            return True
        time.sleep(0.05)
    return False


def test_a_server_that_never_answers_the_handshake_is_killed_at_once(children_running: Running) -> None:
    marker = "gem-mcp-silent-server"
    code = STUBBORN_CHILD.format(marker=marker + "-child") + "time.sleep(120)"
    toolset = MCPToolset(command=sys.executable, args=["-c", code, marker], connect_timeout_s=1.0)
    with pytest.raises(MCPConnectionError, match="did not connect within"):
        toolset.tools()
    assert gone(children_running, marker)
    assert descendants_gone(marker + "-child")
    toolset.close()


def test_close_never_raises_and_kills_a_server_that_ignores_sigterm(
    test_server_script: Path, children_running: Running
) -> None:
    marker = "gem-mcp-stubborn-server"
    code = (
        STUBBORN_CHILD.format(marker=marker + "-child")
        + "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        + "import atexit; atexit.register(time.sleep, 120)\n"  # and it stalls on its way out
        + f"sys.argv = [{str(test_server_script)!r}, 'stdio']\n"
        + "import runpy; runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    toolset = MCPToolset(
        command=sys.executable, args=["-c", code, marker], connect_timeout_s=60.0, server_stderr="discard"
    )
    assert toolset.tools()
    # Shutdown gets a second before the group is killed (the SDK alone would wait 4 s, then SIGKILL).
    toolset.config = toolset.config.model_copy(update={"connect_timeout_s": 1.0})
    toolset.close()
    assert gone(children_running, marker)
    assert descendants_gone(marker + "-child")
    toolset.close()  # idempotent


def test_close_before_any_connection_is_harmless() -> None:
    MCPToolset(command=sys.executable, args=["-c", "pass"]).close()
