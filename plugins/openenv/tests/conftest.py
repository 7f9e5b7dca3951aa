"""Real server processes: ``gem serve`` and OpenEnv SDK servers, on free loopback ports."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from gem_core.testing_servers import free_port

HERE = Path(__file__).parent
GEM = str(Path(sys.executable).with_name("gem"))


class Server:
    """One server process and its URL; ``kill`` ends it at once (a crash, as far as clients can tell)."""

    def __init__(self, argv: list[str], port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 300  # a loaded machine (OpenEnv imports slowly; 120 s was once too short)
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{argv} exited: {self.process.stdout.read() if self.process.stdout else ''}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"{argv} did not answer /health in 300 s")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start(
    *,
    gem: str | None = None,
    native: str | None = None,
    app_dir: Path | None = None,
    sessions: int = 4,
    kw: tuple[str, ...] = (),
    port: int | None = None,
    flags: tuple[str, ...] = (),
) -> Server:
    """Start ``gem serve ID`` (``gem=ID``), a native OpenEnv server (``native=KIND``) or an exported
    package's ``server.app:app`` (``app_dir=``) on ``port`` (default: a free one); ``flags`` go to ``gem serve``."""
    port = port or free_port()
    if app_dir is not None:
        argv = [sys.executable, "-m", "uvicorn", "server.app:app", "--app-dir", str(app_dir), "--port", str(port)]
    elif gem is not None:
        argv = [GEM, "serve", gem, "--port", str(port), "--max-sessions", str(sessions)]
        argv += [f"--kw={item}" for item in kw] + list(flags)
    else:
        argv = [sys.executable, str(HERE / "native_server.py"), str(native), str(port), str(sessions)]
    return Server(argv, port)


@pytest.fixture
def server_process() -> Iterator[Callable[[list[str], int], Server]]:
    """Start any server command (``argv``) that answers ``/health`` on ``port``; killed after the test."""
    started: list[Server] = []

    def run(argv: list[str], port: int) -> Server:
        started.append(Server(argv, port))
        return started[-1]

    yield run
    for server in started:
        server.kill()


@pytest.fixture
def start_server() -> Iterator[Callable[..., Server]]:
    """:func:`start` for one test; its servers are killed after it."""
    started: list[Server] = []

    def tracked(**kwargs: object) -> Server:
        server = start(**kwargs)  # type: ignore[arg-type]
        started.append(server)
        return server

    yield tracked
    for server in started:
        server.kill()


@pytest.fixture(scope="session")
def shared_server() -> Iterator[Callable[..., Server]]:
    """:func:`start`, one server per distinct arguments for the whole run (for tests that leave it as they found it)."""
    servers: dict[tuple[object, ...], Server] = {}

    def get(**kwargs: object) -> Server:
        key = tuple(sorted(kwargs.items()))
        if key not in servers:
            servers[key] = start(**kwargs)  # type: ignore[arg-type]
        return servers[key]

    yield get
    for server in servers.values():
        server.kill()
