"""``gem serve`` as a real process, played by OpenEnv 0.10's own clients (GenericEnvClient, MCPToolClient).

The reference is the same id played in-process with the same seed and the same actions: the
observations, per-turn rewards and terminated/truncated flags must be identical.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient

import gem_core

# Each id is one server process (OpenEnv's import alone takes seconds): a few kinds of game, and a tool env.
GAMES = ["game:GuessTheNumber-v0-easy", "game:Mastermind-v0-easy", "core:NumberGuess-v0-echo"]
GEM = str(Path(sys.executable).with_name("gem"))
OPENENV = str(Path(sys.executable).with_name("openenv"))

Step = tuple[str, float, bool, bool]


def local_episode(env_id: str, seed: int, max_turns: int = 12) -> tuple[str, list[str], list[Step]]:
    """Play ``env_id`` in-process: the first observation, the actions (random but seeded) and each step."""
    chooser = random.Random(seed)
    env = gem_core.make(env_id)
    try:
        obs, _ = env.reset(seed=seed)
        actions: list[str] = []
        steps: list[Step] = []
        for _ in range(max_turns):
            action = _action(chooser)
            actions.append(action)
            text, reward, terminated, truncated, _ = env.step(action)
            steps.append((text, reward, terminated, truncated))
            if terminated or truncated:
                break
        return obs, actions, steps
    finally:
        env.close()


def _action(chooser: random.Random) -> str:
    # Numbers, letters and digit codes cover the games above (boxed or bare); a malformed reply now and then too.
    move = chooser.choice(
        [str(chooser.randint(1, 20)), chooser.choice("aeiostr"), "".join(chooser.choices("123456", k=4))]
    )
    return chooser.choice([f"\\boxed{{{move}}}", f"\\boxed{{{move}}}", move, "<echo>x</echo>", "??"])


def remote_episode_ws(url: str, seed: int, actions: list[str]) -> tuple[str, list[Step]]:
    with GenericEnvClient(base_url=url).sync() as client:
        first = client.reset(seed=seed)
        steps = []
        for action in actions:
            result = client.step({"text": action})
            obs = result.observation
            steps.append((obs["text"], result.reward, obs["terminated"], obs["truncated"]))
            assert result.done == (obs["terminated"] or obs["truncated"])
        return first.observation["text"], steps


@pytest.mark.parametrize("env_id", GAMES)
@pytest.mark.parametrize("seed", [0, 7, 12])
def test_websocket_session_plays_the_same_episode_as_in_process(shared_server, env_id: str, seed: int) -> None:
    server = shared_server(gem=env_id, sessions=8)
    first, actions, expected = local_episode(env_id, seed)
    got_first, got = remote_episode_ws(server.url, seed, actions)
    assert got_first == first
    assert got == expected


@pytest.mark.parametrize("env_id", ["game:GuessTheNumber-v0-easy", "core:NumberGuess-v0-echo"])
def test_http_replays_the_same_episode_as_in_process(shared_server, env_id: str) -> None:
    """OpenEnv's HTTP /reset and /step build a fresh env per request: /step replays ``seed`` + ``history``."""
    server = shared_server(gem=env_id, sessions=8)
    first, actions, expected = local_episode(env_id, 3)
    reset = httpx.post(server.url + "/reset", json={"seed": 3}).json()
    assert reset["observation"]["text"] == first
    for turn, action in enumerate(actions):
        body = {"action": {"text": action}, "seed": 3, "history": actions[:turn]}
        answer = httpx.post(server.url + "/step", json=body).json()
        obs = answer["observation"]
        assert (obs["text"], answer["reward"], obs["terminated"], obs["truncated"]) == expected[turn]
    lost = httpx.post(server.url + "/step", json={"action": {"text": actions[0]}})  # no seed: nothing to replay
    assert lost.status_code == 409 and lost.json()["error"] == "ResetNeeded" and "history" in lost.json()["detail"]


def test_many_sessions_at_once_each_get_their_own_episode(start_server) -> None:
    server = start_server(gem="game:GuessTheNumber-v0-easy", sessions=12)
    seeds = list(range(12))
    plans = {seed: local_episode("game:GuessTheNumber-v0-easy", seed) for seed in seeds}

    async def play(seed: int) -> tuple[str, list[Step]]:
        client = GenericEnvClient(base_url=server.url)
        async with client:
            first = await client.reset(seed=seed)
            steps = []
            for action in plans[seed][1]:
                result = await client.step({"text": action})
                obs = result.observation
                steps.append((obs["text"], result.reward, obs["terminated"], obs["truncated"]))
                await asyncio.sleep(0)  # interleave the sessions turn by turn
            return first.observation["text"], steps

    async def all_at_once() -> list[tuple[str, list[Step]]]:
        return list(await asyncio.gather(*(play(seed) for seed in seeds)))

    for seed, (first, steps) in zip(seeds, asyncio.run(all_at_once()), strict=True):
        assert (first, steps) == (plans[seed][0], plans[seed][2]), f"seed {seed}"


@pytest.mark.parametrize("steps", [0, 1], ids=["between-reset-and-step", "mid-episode"])
def test_a_session_that_disconnects_frees_its_env(start_server, steps: int) -> None:
    server = start_server(gem="game:GuessTheNumber-v0-easy", sessions=1)

    async def scenario() -> None:
        holder = GenericEnvClient(base_url=server.url)
        await holder.reset(seed=1)
        for _ in range(steps):
            await holder.step({"text": "3"})
        refused = GenericEnvClient(base_url=server.url)
        with pytest.raises(RuntimeError, match=r"code: CAPACITY_REACHED"):
            await refused.reset(seed=2)
        await refused.close()
        # Mid-episode, the socket drops without a close message (a crashed trainer worker).
        assert holder._ws is not None
        holder._ws.transport.abort()
        for _ in range(100):  # the server notices the dead socket, closes the env and frees the slot
            newcomer = GenericEnvClient(base_url=server.url)
            try:
                result = await newcomer.reset(seed=2)
                break
            except RuntimeError:
                await asyncio.sleep(0.1)
            finally:
                await newcomer.close()
        else:
            pytest.fail("the dropped session's slot was never freed")
        assert "Guess The Number" in result.observation["text"]

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("not json", "INVALID_JSON"),
        ('{"type": "teleport"}', "UNKNOWN_TYPE"),
        ('{"type": "step", "data": {"txt": "5"}}', "VALIDATION_ERROR"),
        ('{"type": "step", "data": {"text": "5"}}', "EXECUTION_ERROR"),  # no reset yet: gem's ResetNeeded
        ('{"type": "reset", "data": {"seed": -1}}', "EXECUTION_ERROR"),  # gem refuses a negative seed
    ],
    ids=["bad-json", "unknown-type", "action-misses-text", "step-before-reset", "negative-seed"],
)
def test_errors_carry_openenv_error_codes(shared_server, message: str, code: str) -> None:
    from websockets.sync.client import connect

    server = shared_server(gem="game:GuessTheNumber-v0-easy", sessions=8)
    with connect(server.url.replace("http", "ws") + "/ws") as socket:
        socket.send(message)
        answer = json.loads(socket.recv(timeout=30))
    assert answer["type"] == "error"
    assert answer["data"]["code"] == code
    if message.endswith('"5"}}') and code == "EXECUTION_ERROR":
        assert "reset" in answer["data"]["message"]


def test_a_bad_id_or_kwargs_never_serves(tmp_path: Path) -> None:
    unknown = subprocess.run([GEM, "serve", "game:NoSuchGame-v0"], capture_output=True, text=True, timeout=120)
    assert unknown.returncode == 2 and "game:NoSuchGame-v0" in unknown.stderr
    bad_kw = subprocess.run(
        [GEM, "serve", "core:NumberGuess-v0", "--kw", "no_such_option=1"], capture_output=True, text=True, timeout=120
    )
    assert bad_kw.returncode == 2 and "no_such_option" in bad_kw.stderr


def test_tool_env_tools_are_exposed_the_mcp_way(shared_server) -> None:
    server = shared_server(gem="core:NumberGuess-v0-echo", sessions=8)
    listed = httpx.post(server.url + "/mcp", json={"jsonrpc": "2.0", "method": "tools/list", "params": {}, "id": 1})
    (tool,) = listed.json()["result"]["tools"]
    assert tool["name"] == "echo" and tool["inputSchema"]["required"] == ["text"]
    with MCPToolClient(base_url=server.url).sync() as client:  # OpenEnv's own MCP client: HTTP session + WebSocket
        first = client.reset(seed=11)
        assert "echo" in first.observation.text
        assert [t.name for t in client.list_tools()] == ["echo"]
        assert client.call_tool("echo", text="hi") == {"output": "echo: hi", "ok": True, "error": None}
        with pytest.raises(RuntimeError, match="Tool not found: nope"):
            client.call_tool("nope", text="hi")


def test_a_game_has_no_mcp_tools(shared_server) -> None:
    server = shared_server(gem="game:GuessTheNumber-v0-easy", sessions=8)
    answer = httpx.post(server.url + "/mcp", json={"jsonrpc": "2.0", "method": "tools/list", "params": {}, "id": 1})
    assert "does not support MCP" in answer.json()["error"]["message"]


def test_state_and_schema(shared_server) -> None:
    server = shared_server(gem="game:GuessTheNumber-v0-easy", sessions=8)
    schema = httpx.get(server.url + "/schema").json()
    assert set(schema["action"]["properties"]) == {"text", "metadata"}
    assert {"text", "terminated", "truncated", "info"} <= set(schema["observation"]["properties"])
    with GenericEnvClient(base_url=server.url).sync() as client:
        client.reset(seed=5)
        result = client.step({"text": "2"})
        state = client.state()
    assert state["env_id"] == "game:GuessTheNumber-v0-easy" and state["seed"] == 5 and state["step_count"] == 1
    assert state["episode_return"] == pytest.approx(result.reward)


def test_openenv_validate_passes_on_the_running_server(shared_server) -> None:
    server = shared_server(gem="core:NumberGuess-v0-echo", sessions=8)
    report = subprocess.run([OPENENV, "validate", "--url", server.url], capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stdout + report.stderr
    assert "Verdict: PASS" in report.stdout


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**31 - 1),
    replies=st.lists(
        st.text(max_size=40) | st.integers(0, 12).map(lambda n: f"\\boxed{{{n}}}"), min_size=1, max_size=5
    ),
)
def test_any_replies_give_the_in_process_episode(shared_server, seed: int, replies: list[str]) -> None:
    """The wire carries any text (unicode, control characters, JSON-looking replies) and any seed faithfully."""
    server = shared_server(gem="game:GuessTheNumber-v0-easy", sessions=8)
    env = gem_core.make("game:GuessTheNumber-v0-easy")
    first = env.reset(seed=seed)[0]
    expected: list[Step] = []
    for reply in replies:
        text, reward, terminated, truncated, _ = env.step(reply)
        expected.append((text, reward, terminated, truncated))
        if terminated or truncated:
            break
    env.close()
    got_first, got = remote_episode_ws(server.url, seed, replies[: len(expected)])
    assert (got_first, got) == (first, expected)
