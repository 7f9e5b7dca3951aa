"""gem's own OpenEnv protocol code, both ends, with no OpenEnv installed: gem-openenv's client plays ``gem serve``.

These run in tox's ``together`` env too, beside gem-verifiers (where openenv cannot be installed): seeds of any
size, text with lone surrogates, ``success`` and ``info`` carried through, and the episode equal to in-process.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gem_core
from gem_core.errors import EnvServerAtCapacity
from gem_core.testing import check_env
from gem_openenv.client import DEFAULT_MAX_SEED, wire_safe

GAME = "game:GuessTheNumber-v0-easy"
#: A gem env whose info says ``success`` (core's NumberGuess).
GUESS = "core:NumberGuess-v0"

# Text with lone surrogates: hypothesis' text() leaves the Cs category out by default.
surrogate_text = st.text(st.characters(codec=None, categories=["Cs", "Lu", "Nd", "Zs"]), max_size=12)


def remote(url: str, **kwargs: object) -> gem_core.Env:
    return gem_core.make("openenv:Remote-v0", base_url=url, **kwargs)


def in_process(env_id: str, seed: int, actions: list[str]) -> list[tuple[object, ...]]:
    """The reset's text and info, then each step's tuple, played in-process."""
    env = gem_core.make(env_id)
    try:
        obs, info = env.reset(seed=seed)
        played: list[tuple[object, ...]] = [(obs, info)]
        for action in actions:
            played.append(env.step(action))
            if played[-1][2] or played[-1][3]:
                break
        return played
    finally:
        env.close()


def played_remotely(url: str, seed: int, actions: list[str]) -> list[tuple[object, ...]]:
    with remote(url) as env:
        obs, info = env.reset(seed=seed)
        played: list[tuple[object, ...]] = [(obs, info)]
        for action in actions:
            played.append(env.step(action))
            if played[-1][2] or played[-1][3]:
                break
        return played


def test_openenv_is_not_needed() -> None:
    """gem-openenv's client and server import nothing of OpenEnv (FastMCP, gradio, FastAPI): a fresh process."""
    import subprocess
    import sys

    probe = (
        "import sys, gem_openenv.app, gem_openenv.client, gem_openenv.server, gem_openenv.export; "
        "print([m for m in sys.modules if m.split('.')[0] in ('openenv', 'fastmcp', 'gradio', 'fastapi')])"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**70) | st.sampled_from([2**32 - 1, 2**32, 2**63, 2**64 + 5]))
def test_any_seed_plays_the_in_process_episode_on_gem_serve(shared_server, seed: int) -> None:
    """gem envs take any seed: against gem serve it goes over the wire as is (no folding), whatever its size."""
    server = shared_server(gem=GUESS, sessions=8)
    actions = ["8", "4", "12"]
    assert played_remotely(server.url, seed, actions) == in_process(GUESS, seed, actions)


def test_success_and_info_come_through_from_gem_serve(shared_server) -> None:
    server = shared_server(gem=GUESS, sessions=8)
    answer = next(str(n) for n in range(1, 17) if in_process(GUESS, 3, [str(n)])[1][4]["success"])
    with remote(server.url) as played:
        played.reset(seed=3)
        wrong = played.step("17")
        right = played.step(answer)
    assert wrong[4] == {"success": False, "parsed_action": "17"}
    assert right[2] and right[4] == {"success": True, "parsed_action": answer}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=surrogate_text)
def test_text_with_lone_surrogates_is_sent_as_its_characters(shared_server, text: str) -> None:
    """The client sends every lone surrogate as U+FFFD (never a crash, never two read back as one character)."""
    server = shared_server(gem="core:NumberGuess-v0-echo", sessions=8)
    expected = in_process("core:NumberGuess-v0-echo", 5, [wire_safe(text)])
    assert not re.search("[\ud800-\udfff]", json.dumps(wire_safe(text), ensure_ascii=False))
    assert played_remotely(server.url, 5, [text]) == expected


@pytest.mark.parametrize(
    "text", ["\ud800", "\udfff tail", "\ud83d\ude00", "<echo>\udc80</echo>"], ids=["high", "low", "pair", "in-tool"]
)
def test_gem_serve_answers_raw_lone_surrogates_in_ascii_json(shared_server, text: str) -> None:
    """Another client may send lone surrogates (escaped in JSON): gem serve answers, over WebSocket and HTTP."""
    import httpx
    from websockets.sync.client import connect

    server = shared_server(gem="core:NumberGuess-v0-echo", sessions=8)
    with connect(server.url.replace("http", "ws") + "/ws", proxy=None) as socket:
        socket.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
        assert json.loads(socket.recv(timeout=60))["type"] == "observation"
        socket.send(json.dumps({"type": "step", "data": {"text": text}}))
        raw = socket.recv(timeout=60)
    answer = json.loads(raw)
    assert answer["type"] == "observation", answer
    assert isinstance(raw, str) and raw.isascii()
    body = json.dumps({"action": {"text": text}, "seed": 1})  # ASCII, escaped: httpx's json= cannot encode them
    over_http = httpx.post(server.url + "/step", content=body, headers={"content-type": "application/json"}, timeout=60)
    assert (
        over_http.status_code == 200
        and over_http.json()["observation"]["text"] == answer["data"]["observation"]["text"]
    )


def test_the_default_seed_range_folds_only_what_lies_past_it() -> None:
    """Against a server that is not gem's, seeds past 2**32 - 1 are folded into range by a stable hash."""
    from gem_openenv.client import OpenEnvEnv

    env = OpenEnvEnv.__new__(OpenEnvEnv)
    env.max_seed = DEFAULT_MAX_SEED
    assert [env.wire_seed(s) for s in (0, 7, DEFAULT_MAX_SEED)] == [0, 7, DEFAULT_MAX_SEED]
    folded = [env.wire_seed(s) for s in (2**32, 2**32 + 1, 2**63, 2**64 + 5)]
    assert all(0 <= s <= DEFAULT_MAX_SEED for s in folded) and len(set(folded)) == 4
    assert folded == [env.wire_seed(s) for s in (2**32, 2**32 + 1, 2**63, 2**64 + 5)]  # stable


def test_a_full_gem_server_names_gem_serves_flag(start_server) -> None:
    server = start_server(gem=GUESS, sessions=1)
    with remote(server.url) as holder:
        holder.reset(seed=1)
        with remote(server.url, capacity_wait_s=0.3) as env, pytest.raises(EnvServerAtCapacity) as caught:
            env.reset(seed=2)
    assert "gem serve --max-sessions N" in str(caught.value) and "max_concurrent_envs" not in str(caught.value)


def test_gem_check_needs_one_session_of_gem_serve(start_server) -> None:
    server = start_server(gem=GUESS, sessions=1)
    check_env(remote(server.url), env_factory=lambda: remote(server.url))


def test_the_client_leaves_the_global_random_alone(shared_server) -> None:
    """websockets' keepalive pings draw from the global ``random`` (every 20 s): the client sends none."""
    server = shared_server(gem=GUESS)
    with remote(server.url) as env:
        env.reset(seed=0)
        socket = env.unwrapped._client.socket  # type: ignore[attr-defined]
        assert socket.ping_interval is None and socket.keepalive_thread is None
