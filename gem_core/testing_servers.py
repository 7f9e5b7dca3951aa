"""Real servers for tests: a free port, a server process that is up first, a scripted chat server.

Tests start real servers (``transformers serve``, vLLM's OpenAI server, ...) as processes on
loopback. :func:`serve_until_healthy` starts one in its own session, waits until its health URL
answers 200, and kills its whole process group at the end, so no test leaves a server behind.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


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


@dataclass
class ScriptedChatServer:
    """A running :func:`scripted_chat_server`: its base URL (``.../v1``) and every request body it received."""

    url: str
    bodies: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def scripted_chat_server(answer: Callable[[dict[str, Any]], str]) -> Iterator[ScriptedChatServer]:
    """Serve OpenAI chat completions on loopback over real HTTP; ``answer(body)`` gives each reply's text.

    For tests of clients (``gem eval``'s OpenAI backend and the like) where no model server runs: the
    replies are scripted, the HTTP exchange and the completion's shape are real.
    """
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            received.append(body)
            reply = {
                "id": f"scripted-{len(received)}",
                "object": "chat.completion",
                "model": body.get("model", "scripted"),
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": answer(body)}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield ScriptedChatServer(f"http://127.0.0.1:{httpd.server_address[1]}/v1", received)
    finally:
        httpd.shutdown()
        httpd.server_close()
