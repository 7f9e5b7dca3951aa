"""Fixtures: a real MCP server from PyPI over stdio, and the suite's own server over HTTP on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gem_tool_mcp import MCPToolset

from gem_core.testing_servers import free_port

TEST_SERVER = Path(__file__).with_name("http_server.py")


def _children_running(marker: str) -> list[int]:
    """Pids of this process's live children whose command line contains ``marker`` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and marker in cmdline:
            pids.append(int(entry.name))
    return pids


@pytest.fixture
def children_running() -> Callable[[str], list[int]]:
    """``children_running(marker)``: pids of live child processes whose command line contains ``marker``."""
    return _children_running


@pytest.fixture
def test_server_script() -> Path:
    """Path of the suite's MCP server script (``python http_server.py PORT|stdio``)."""
    return TEST_SERVER


@pytest.fixture(scope="module")
def time_toolset() -> Iterator[MCPToolset]:
    """mcp-server-time (PyPI), started over stdio once for the module."""
    toolset = MCPToolset(
        name="time",
        command=sys.executable,
        args=["-m", "mcp_server_time", "--local-timezone", "UTC"],
        server_stderr="discard",
    )
    yield toolset
    toolset.close()


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """The suite's MCPServer over streamable HTTP, bound to 127.0.0.1 only, in a subprocess."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(TEST_SERVER), str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 90
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"test MCP server exited with {proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("test MCP server did not start within 90 s") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
