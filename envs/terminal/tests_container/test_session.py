"""One container per episode through a real runtime: the session protocol, the limits, the check phase."""

from __future__ import annotations

import string
import subprocess
import sys
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gem_terminal.container.backend import ContainerConfig
from gem_terminal.container.images import build_task_image
from gem_terminal.container.runtime import Runtime
from gem_terminal.container.session import ContainerEpisode
from gem_terminal.loader import TerminalTask, load_task
from gem_tool_python.episode import OUTPUT_CUT, EpisodeConfig

from .conftest import FIXTURES


@pytest.fixture(scope="module")
def image(runtime: Runtime, container_config: ContainerConfig) -> str:
    task = load_task(FIXTURES / "apt-pip-heredoc", backend="container")
    assert isinstance(task, TerminalTask), task
    return build_task_image(runtime, task, ca_bundle=container_config.ca_path(), base_images="map")


@pytest.fixture(scope="module")
def episode(runtime: Runtime, image: str) -> Iterator[ContainerEpisode]:
    config = EpisodeConfig(command_timeout_s=3, max_output_bytes=4096, episode_memory_mb=256, max_procs=64)
    with ContainerEpisode(runtime, image, config) as ep:
        yield ep


def test_output_streams_exit_code_and_state_across_commands(episode: ContainerEpisode) -> None:
    result = episode.run("echo out; echo err >&2; exit 3")
    assert (result.status, result.stdout, result.stderr, result.exit_code) == ("exit", "out\n", "err\n", 3)
    assert episode.run("echo kept > /tmp/state && cd /").ok
    assert episode.run("cat /tmp/state; pwd").stdout == "kept\n/app\n"  # files persist; each command starts in WORKDIR


def test_timeout_kills_the_command_s_process_group(episode: ContainerEpisode) -> None:
    result = episode.run("sleep 60 & sleep 60")
    assert result.status == "timeout"
    assert episode.run("ps -eo args= | grep -x 'sleep 60' || echo none").stdout == "none\n"
    # and reaped: pid 1 adopts the orphaned background job; zombies would count against the pids limit
    assert episode.run("ps -eo stat= | grep -c '^Z' || true").stdout == "0\n"


def test_a_command_writing_past_the_cap_runs_to_its_end_and_keeps_both_ends(episode: ContainerEpisode) -> None:
    # As in the sandbox: a build or a solution printing its progress must not die of it.
    result = episode.run("echo first; seq 1 40000; echo last; seq 1 30000 >&2; echo done > /tmp/finished; exit 3")
    assert (result.status, result.exit_code) == ("exit", 3), result
    cut = OUTPUT_CUT.format(cap=4096)
    assert result.stdout.startswith("first\n1\n2\n") and result.stdout.endswith("40000\nlast\n")
    assert cut in result.stdout and len(result.stdout) == 4096 + len(cut)
    assert result.stderr.startswith("1\n2\n") and result.stderr.endswith("\n30000\n") and cut in result.stderr
    assert episode.run("cat /tmp/finished").stdout == "done\n"
    exact = episode.run("head -c 4096 /dev/zero | tr '\\0' a")  # at the cap: all of it, nothing cut
    assert exact.ok and exact.stdout == "a" * 4096
    endless = episode.run("yes")  # read and dropped to its timeout
    assert endless.status == "timeout" and endless.stdout.startswith("y\ny\n") and cut in endless.stdout
    # What a command wrote before it returned is kept when a background job still holds its output.
    held = episode.run("echo started; (sleep 1; echo late) &")
    assert held.ok and held.stdout.startswith("started\n"), held
    assert episode.run("echo next").stdout == "next\n"


def test_background_jobs_outlive_their_command_and_tmux_has_a_pty(episode: ContainerEpisode) -> None:
    assert episode.run("nohup sleep 30 > /dev/null 2>&1 & echo started").stdout == "started\n"
    assert episode.run("ps -eo args= | grep -qx 'sleep 30' && echo alive").stdout == "alive\n"
    assert episode.run("tmux new-session -d -s t 'sleep 30' && tmux list-sessions -F '#S'").stdout == "t\n"
    assert episode.run("test -c /dev/ptmx && echo ok").stdout == "ok\n"


def test_no_network_and_no_test_dir(episode: ContainerEpisode) -> None:
    probe = "python3 -c \"import socket; socket.create_connection(('deb.debian.org', 80), timeout=3)\""
    assert not episode.run(probe).ok
    assert episode.run("ip -o link 2>/dev/null | grep -v ' lo:' ; ls /sys/class/net").stdout.split() == ["lo"]
    assert episode.run("echo ${TEST_DIR-unset}; test -e /tests || echo no-tests").stdout == "unset\nno-tests\n"


def test_memory_limit_ends_the_command_not_the_episode(episode: ContainerEpisode) -> None:
    result = episode.run("python3 -c \"x = bytearray(600 << 20); print('allocated')\"")
    assert "allocated" not in result.stdout and not result.ok
    assert episode.run("echo alive").stdout == "alive\n"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=string.printable + "é€\t", max_size=200))
def test_any_text_round_trips_through_the_session(episode: ContainerEpisode, text: str) -> None:
    result = episode.run(f"cat <<'GEMEOF'\n{text}\nGEMEOF")
    if "\nGEMEOF\n" in f"\n{text}\n":
        return  # the text ends the heredoc early: not a round trip
    assert result.ok and result.stdout == text + "\n"


def test_check_phase_kills_every_agent_process_and_runs_as_root(
    runtime: Runtime, image: str, no_leftovers: None
) -> None:
    config = EpisodeConfig(command_timeout_s=5)
    with ContainerEpisode(runtime, image, config, agent_user="65534") as episode:
        assert episode.run("id -u").stdout == "65534\n"
        watcher = (
            "nohup sh -c 'while true; do cp /tests/secret /tmp/stolen 2>/dev/null; sleep 0.05; done' >/dev/null 2>&1 &"
        )
        assert episode.run(watcher).ok
        assert episode.run("setsid sleep 300 < /dev/null > /dev/null 2>&1 & echo $!").ok
        episode.write_file("/tests/secret", b"s3cret")
        result = episode.run("id -u; echo $HOME; cat /tmp/stolen 2>/dev/null || echo none; ps -eo args=", checker=True)
        lines = result.stdout.splitlines()
        assert lines[:3] == ["0", "/gem-checker-home", "none"]
        assert "sleep 300" not in lines and not any(line.startswith("sh -c while") for line in lines)
        assert episode.run("echo agent").status == "ok"  # commands after the check run in the checker's container


def test_replaced_system_program_refuses_the_checker(runtime: Runtime, image: str, no_leftovers: None) -> None:
    with ContainerEpisode(runtime, image, EpisodeConfig()) as episode:
        assert episode.run(
            "printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/pytest && chmod +x /usr/local/bin/pytest"
        ).ok
        assert episode.run("echo 'import os' > /usr/lib/python3.13/sitecustomize.py").ok
        result = episode.run("exit 0", checker=True)
        assert not result.ok and "/usr/local/bin/pytest" in (result.error or "")
        assert "sitecustomize" in (result.error or "")


def test_close_is_idempotent_and_leaves_nothing(runtime: Runtime, image: str, no_leftovers: None) -> None:
    episode = ContainerEpisode(runtime, image, EpisodeConfig())
    episode.run("sleep 100 &")
    episode.close()
    episode.close()
    assert episode.run("true").status == "closed" and episode.spent == "closed"


def test_an_episode_never_closed_is_removed_when_its_process_exits(runtime: Runtime, image: str) -> None:
    script = (
        "from gem_terminal.container.backend import runtime_for\n"
        "from gem_terminal.container.session import ContainerEpisode\n"
        "from gem_tool_python.episode import EpisodeConfig\n"
        f"episode = ContainerEpisode(runtime_for({runtime.kind!r}), {image!r}, EpisodeConfig())\n"
        "episode.run('sleep 100 &')\n"
        "print(episode.name)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    name = done.stdout.strip()
    assert name.startswith("gem-ep-")
    listing = runtime.call("ps", "-a", "--filter", f"name={name}", "--format", "{{.Names}}").stdout.decode()
    assert listing.strip() == ""
