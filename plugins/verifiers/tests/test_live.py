"""A real verifiers episode loop (``Env.serving`` + ``Env.run_episode``) against a real model server.

The env is the SDK-written taskset and in-process harness of ``gem_vf_toy``; the model is a tiny
random Qwen2 served by ``transformers serve`` (an OpenAI-compatible server) on loopback. verifiers
reaches it through its relay (eval) client, which records text, not token ids (see
docs/verifiers.md): the episodes convert with ``require_tokens=False`` and are refused without it.
"""

from __future__ import annotations

import asyncio
import http.server
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import verifiers.v1 as vf
from gem_vf_toy import FOLLOW_UP

from gem_core.rl.advantages import rebn_advantages
from gem_core.testing_servers import ServerDidNotStart, free_port, serve_until_healthy
from gem_verifiers import VerifiersEpisodeFailed, VerifiersTraceError, run_episodes, to_gem_episodes

pytest.importorskip("torch", reason="the verifiers tox env installs torch (CPU) for transformers serve")

# one transformers serve and one played batch for the file: under pytest-xdist, on one worker
pytestmark = pytest.mark.xdist_group("verifiers-live-server")


@pytest.fixture(scope="module")
def model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    from gem_core.testing_models import save_tiny_model

    model_dir = save_tiny_model(tmp_path_factory.mktemp("tiny-model"), hidden_size=64, num_heads=2)
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    cli = Path(sys.executable).parent / "transformers"
    command = [str(cli), "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    try:
        with serve_until_healthy(command, f"http://127.0.0.1:{port}/health", log, env=env):
            yield f"http://127.0.0.1:{port}/v1", str(model_dir)
    except ServerDidNotStart as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def played(model_server: tuple[str, str]) -> tuple[list[vf.Episode], list[list]]:
    base_url, model = model_server
    os.environ.setdefault("GEM_VF_KEY", "local")  # the relay client sends a bearer token; the server ignores it
    # the agent's runtime on this host (verifiers' default is a Prime sandbox, reached through a tunnel)
    agent = vf.AgentConfig(runtime=vf.SubprocessConfig())
    env = vf.load_environment(vf.SingleAgentEnvConfig(taskset=vf.TasksetConfig(id="gem_vf_toy"), agent=agent))
    tasks = list(env.taskset)[:2]
    ctx = vf.ModelContext(model=model, client=vf.EvalClientConfig(base_url=base_url, api_key_var="GEM_VF_KEY"))

    async def play() -> list[vf.Episode]:
        async with env.serving():
            return list(await asyncio.gather(*(env.run_episode(task, ctx) for task in tasks for _ in range(2))))

    raw = asyncio.run(play())
    converted = asyncio.run(run_episodes(env, tasks, ctx, rollouts_per_task=2, require_tokens=False))
    return raw, converted


def test_verifiers_runs_multi_turn_episodes_through_its_interception(played: tuple) -> None:
    raw, _ = played
    assert len(raw) == 4
    for episode in raw:
        assert episode.ok, [e.message for e in episode.errors]
        (trace,) = episode.traces
        assert trace.num_turns == 2
        assert set(trace.rewards) == {"correct"} and set(trace.metrics) == {"reply_chars"}


def test_relay_traces_are_refused_for_token_layouts(played: tuple) -> None:
    raw, _ = played
    with pytest.raises(VerifiersTraceError, match="relay \\(eval\\) client"):
        to_gem_episodes(raw[0])


def test_run_episodes_gives_gem_episodes_with_rewards_and_metrics(played: tuple) -> None:
    _, converted = played
    assert [len(group) for group in converted] == [1, 1, 1, 1]
    episodes = [group[0] for group in converted]
    for episode in episodes:
        first, second = episode.turns
        assert first.observation.startswith("What is ") and first.next_observation == FOLLOW_UP
        assert second.observation == FOLLOW_UP and second.done
        assert first.reward == 0.0
        meta = episode.metadata["verifiers"]
        assert second.reward == meta["reward"] == meta["rewards"]["correct"]["score"]
        assert meta["metrics"]["reply_chars"] == float(len(second.action.strip()))
        assert meta["ok"] and meta["task_type"] == "AdditionTask"
    # a task's rollouts share a start state: one GRPO/ReBN group each
    assert episodes[0].start_state_id == episodes[1].start_state_id != episodes[2].start_state_id
    advantages = rebn_advantages(episodes, gamma=0.9)
    assert [len(a) for a in advantages] == [2, 2, 2, 2]


class _BadGateway(http.server.BaseHTTPRequestHandler):
    """A model server behind a broken proxy: every request gets 502."""

    def do_POST(self) -> None:
        body = b'{"error": {"message": "upstream connect error", "type": "bad_gateway"}}'
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(502)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *args: object) -> None:
        pass


def test_a_502_from_the_model_server_reaches_the_message() -> None:
    """verifiers records the provider's 502 on the trace (not the episode): the failure names it."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BadGateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        os.environ.setdefault("GEM_VF_KEY", "local")
        agent = vf.AgentConfig(runtime=vf.SubprocessConfig())
        env = vf.load_environment(vf.SingleAgentEnvConfig(taskset=vf.TasksetConfig(id="gem_vf_toy"), agent=agent))
        base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        ctx = vf.ModelContext(model="tiny", client=vf.EvalClientConfig(base_url=base_url, api_key_var="GEM_VF_KEY"))

        async def play() -> vf.Episode:
            async with env.serving():
                return await asyncio.wait_for(env.run_episode(next(iter(env.taskset)), ctx), timeout=120)

        episode = asyncio.run(play())
    finally:
        server.shutdown()
        server.server_close()
    assert not episode.ok
    levels = {
        "episode": bool(episode.errors),
        "trace": any(t.errors for t in episode.traces),
        "call": any(c.error for t in episode.traces for c in t.calls),
    }
    assert levels["trace"] or levels["call"], levels
    with pytest.raises(VerifiersEpisodeFailed) as failed:
        to_gem_episodes(episode, require_tokens=False)
    assert "502" in str(failed.value) and "no error recorded" not in str(failed.value)
