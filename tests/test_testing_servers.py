from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gem_core.testing_servers import ServerDidNotStart, free_port, serve_until_healthy


def test_a_server_is_healthy_inside_the_block_and_gone_after_it(tmp_path: Path) -> None:
    port = free_port()
    command = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)]
    with serve_until_healthy(command, f"http://127.0.0.1:{port}/", tmp_path / "log", poll_s=0.1) as process:
        assert process.poll() is None
    assert process.poll() is not None


def test_a_server_that_exits_first_is_an_error_with_its_log(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "print('bad config'); raise SystemExit(3)"]
    with (
        pytest.raises(ServerDidNotStart, match=r"exited[\s\S]*bad config"),
        serve_until_healthy(command, f"http://127.0.0.1:{free_port()}/", tmp_path / "log", poll_s=0.1),
    ):
        pass
