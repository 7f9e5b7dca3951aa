"""Real servers for tests: a free loopback port, and a server process that is up before the test starts.

Tests start real servers (``transformers serve``, vLLM's OpenAI server, ...) as processes on
loopback. :func:`serve_until_healthy` starts one in its own session, waits until its health URL
answers 200, and kills its whole process group at the end, so no test leaves a server behind.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerDidNotStart(RuntimeError):
    """The server process exited, or its health URL did not answer 200 in time; the message ends with its log."""


@contextmanager
def serve_until_healthy(
    command: Sequence[str],
    health_url: str,
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 300.0,
    poll_s: float = 0.5,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` (stdout and stderr to ``log_path``) until ``health_url`` answers 200; kill it on exit.

    Args:
        command: The server's command line.
        health_url: A URL that answers 200 once the server serves.
        log_path: Where the server's output goes (its tail is in the error if it does not start).
        env: The process environment (default: this process's).
        timeout_s: How long the server may take to become healthy.
        poll_s: Seconds between health checks.

    Raises:
        ServerDidNotStart: The process exited first, or ``timeout_s`` passed.
    """
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            list(command), stdout=log, stderr=subprocess.STDOUT, env=dict(env or os.environ), start_new_session=True
        )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(health_url, timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                why = "exited" if process.poll() is not None else f"was not healthy within {timeout_s:g} s"
                tail = log_path.read_text(errors="replace")[-3000:]
                raise ServerDidNotStart(f"{command[0]} {why} ({health_url}):\n{tail}")
            time.sleep(poll_s)
        yield process
    finally:
        with suppress(ProcessLookupError):  # the group is already gone when the server exited first
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
