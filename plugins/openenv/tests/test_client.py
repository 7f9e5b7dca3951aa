"""OpenEnv servers (real processes) as gem envs: schema-built actions, rewards, capacity, server death,
``gem check``, the vector envs, the runner, and the conformance suite played through ``gem serve``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import gem_core
from gem_core.conformance import CASES, ConformanceCase, assert_conformant, record_from_episode, scripted_generation
from gem_core.episode import EpisodeEngine, EpisodeJob, Generation, TurnRequest
from gem_core.errors import (
    ActionSchemaError,
    EnvServerAtCapacity,
    EnvServerUnavailable,
    ResetNeeded,
    VectorEnvError,
)
from gem_core.rl.advantages import rebn
from gem_core.rl.returns import discounted_returns
from gem_core.rl.types import Episode
from gem_core.testing import check_env

GEM = str(Path(sys.executable).with_name("gem"))


def remote(url: str, **kwargs: object) -> gem_core.Env:
    return gem_core.make("openenv:Remote-v0", base_url=url, **kwargs)


def seen(message: str, value: int, target: int) -> str:
    """What the model reads of the target env's observation: each of its fields."""
    return f"message: {message}\nvalue: {value}\ntarget: {target}"


def target_of(text: str) -> int:
    return int(text.rsplit("target: ", 1)[1])


def test_a_one_field_action_takes_the_raw_text(shared_server) -> None:
    server = shared_server(native="echo", sessions=8)
    with remote(server.url) as env:
        obs, _ = env.reset(seed=0)
        assert obs == "say something"
        steps = [env.step(text) for text in ("hello", "{not json}", "abc")]
    assert [s[0] for s in steps] == ["HELLO", "{NOT JSON}", "ABC"]
    assert [s[1] for s in steps] == pytest.approx([0.5, 1.0, 0.3])  # the server's reward of each step
    assert [s[2] for s in steps] == [False, False, True] and not any(s[3] for s in steps)


def test_a_json_action_is_built_from_the_schema(shared_server) -> None:
    server = shared_server(native="target", sessions=8)
    with remote(server.url) as env:
        obs, _ = env.reset(seed=3)  # target 5
        assert obs == seen("reach 5 from 0", 0, 5)
        first = env.step('{"op": "add", "amount": 3}')
        fenced = env.step('```json\n{"op": "add", "amount": 2}\n```')
    assert first[:3] == (seen("value 3, target 5", 3, 5), pytest.approx(-0.1), False)
    assert first[4]["openenv_observation"]["value"] == 3
    assert fenced[:3] == (seen("reached", 5, 5), 1.0, True)
    with pytest.raises(ResetNeeded):
        env.step('{"op": "add", "amount": 1}')


@pytest.mark.parametrize(
    "text",
    ["add 3", '{"op": "mul", "amount": 3}', '{"op": "add"}', '{"op": "add", "amount": 30}', "[1, 2]"],
    ids=["prose", "bad-enum", "missing-field", "out-of-range", "not-an-object"],
)
def test_text_that_does_not_fit_the_schema_names_it(shared_server, text: str) -> None:
    server = shared_server(native="target", sessions=8)
    with remote(server.url) as env:
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step(text)  # the gem contract: an observation, not a raise
        assert info == {"format_error": True} and (reward, terminated, truncated) == (0.0, False, False)
        assert '"op": "one of add|sub"' in obs and '"amount": "integer"' in obs
    with remote(server.url, on_bad_action="raise") as env:
        env.reset(seed=0)
        with pytest.raises(ActionSchemaError, match='"amount": "integer"'):
            env.step(text)


def test_gem_check_and_gem_list_on_a_named_server(shared_server) -> None:
    server = shared_server(native="target", sessions=8)
    environ = {**os.environ, "GEM_OPENENV_SERVERS": f"target={server.url}"}
    listed = subprocess.run([GEM, "list", "-n", "openenv"], capture_output=True, text=True, env=environ, timeout=120)
    assert f"openenv:target     gem-openenv   remote: the OpenEnv server at {server.url}" in listed.stdout
    checked = subprocess.run([GEM, "check", "openenv:target"], capture_output=True, text=True, env=environ, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "ok    openenv:target" in checked.stdout


def test_check_env_in_process(shared_server) -> None:
    server = shared_server(native="target", sessions=8)
    with remote(server.url) as env:
        check_env(env, seed=4, env_factory=lambda: remote(server.url))


def test_capacity_reached_is_waited_out_with_backoff(start_server) -> None:
    server = start_server(native="target", sessions=1)
    holder = remote(server.url)
    holder.reset(seed=1)
    results: list[str] = []

    def second() -> None:
        with remote(server.url, capacity_wait_s=60) as env:
            results.append(env.reset(seed=2)[0])

    waiter = threading.Thread(target=second)
    waiter.start()
    time.sleep(1.0)  # the waiter is refused (CAPACITY_REACHED) and backs off meanwhile
    assert not results
    holder.close()
    waiter.join(timeout=60)
    assert results == [seen("reach 4 from 0", 0, 4)]


def test_capacity_that_never_frees_is_a_typed_error(start_server) -> None:
    server = start_server(native="target", sessions=1)
    with remote(server.url) as holder:
        holder.reset(seed=1)
        with remote(server.url, capacity_wait_s=0.5) as env, pytest.raises(EnvServerAtCapacity) as caught:
            env.reset(seed=2)
    # The fix for the server at hand: OpenEnv's create_app, not gem serve's flag (this server is not gem's).
    assert "max_concurrent_envs=N" in str(caught.value) and "gem serve" not in str(caught.value)


def test_gem_check_needs_one_session_only(start_server) -> None:
    """OpenEnv's create_app serves one session by default: gem check opens one at a time."""
    server = start_server(native="target", sessions=1)
    environ = {**os.environ, "GEM_OPENENV_SERVERS": f"one={server.url}"}
    checked = subprocess.run([GEM, "check", "openenv:one"], capture_output=True, text=True, env=environ, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "ok    openenv:one" in checked.stdout


def test_server_death_is_a_typed_error(start_server) -> None:
    server = start_server(native="target", sessions=3)
    env = remote(server.url)
    env.reset(seed=0)
    vec = gem_core.make_vec("openenv:Remote-v0", 2, base_url=server.url, max_threads=2)
    vec.reset(seed=0)
    server.kill()
    with pytest.raises(EnvServerUnavailable, match=server.url):
        env.step('{"op": "add", "amount": 1}')
    with pytest.raises(VectorEnvError) as caught:  # in a vector env: each sub-env's typed error, by index
        vec.step(['{"op": "add", "amount": 1}'] * 2)
    assert sorted(caught.value.failures) == [0, 1]
    assert all(isinstance(e, EnvServerUnavailable) for e in caught.value.failures.values())
    vec.close()
    with pytest.raises(EnvServerUnavailable, match="went away during reset"):
        env.reset(seed=0)
    env.close()
    with pytest.raises(EnvServerUnavailable, match="is it running"):
        remote(server.url)


@pytest.mark.parametrize("backend", ["sync", "async"])
def test_vector_envs(shared_server, backend: str) -> None:
    server = shared_server(native="target", sessions=8)
    vec = gem_core.make_vec("openenv:Remote-v0", 3, backend=backend, base_url=server.url)
    try:
        obs, _ = vec.reset(seed=1)  # one root seed; each sub-env gets its own episode seed from it
        targets = [target_of(text) for text in obs]
        moves = [f'{{"op": "add", "amount": {target - 1}}}' for target in targets]
        obs, rewards, terminated, truncated, _ = vec.step(moves)
        assert list(rewards) == pytest.approx([-0.1] * 3) and not any(terminated) and not any(truncated)
        assert list(obs) == [seen(f"value {t - 1}, target {t}", t - 1, t) for t in targets]
        obs, rewards, terminated, _, _ = vec.step(['{"op": "add", "amount": 1}'] * 3)
        assert list(rewards) == [1.0] * 3 and all(terminated)
    finally:
        vec.close()


def test_the_runner_plays_an_openenv_env(shared_server) -> None:
    server = shared_server(native="target", sessions=8)

    async def policy(messages: list[dict[str, str]]) -> str:
        target = target_of(messages[-1]["content"])
        return f'{{"op": "add", "amount": {target}}}'

    async def play() -> list[Episode]:
        from gem_core.runner import run_episodes

        return await run_episodes(lambda: remote(server.url), 4, policy=policy, seed=0, max_in_flight=2)

    episodes = asyncio.run(play())
    assert len(episodes) == 4
    for episode in episodes:  # reach N from 0 -> one move of N: the per-step reward comes through
        assert [t.reward for t in episode.turns] == [1.0] and episode.turns[-1].terminated


def _serve_args(case: ConformanceCase) -> dict[str, object]:
    return {"gem": case.env_id, "sessions": 8, "kw": tuple(f"{k}={v}" for k, v in sorted(case.env_kwargs.items()))}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_conformance_through_gem_serve_and_openenv(shared_server, case: ConformanceCase) -> None:
    """A gem env served by OpenEnv's server and played back through OpenEnv's client gives the reference numbers."""
    assert not case.wrappers  # the server applies the id's own wrappers; extra ones would go on the client side
    server = shared_server(**_serve_args(case))
    tokenizer = case.tokenizer()
    engine = EpisodeEngine(tokenizer, case.limits)
    jobs = [EpisodeJob(env=remote(server.url), env_id=case.env_id, seed=seed) for seed in case.seeds]

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        return [scripted_generation(case, tokenizer, r.prompt_ids or [], r.max_tokens) for r in requests]

    try:
        episodes = [session.episode() for session in engine.play_batch(jobs, generate)]
    finally:
        for job in jobs:
            job.env.close()
    returns = [discounted_returns(ep, case.gamma) for ep in episodes]  # ReBN over the whole case, as the suite does
    advantages = np.split(rebn(np.concatenate(returns)), np.cumsum([len(r) for r in returns])[:-1])
    records = [record_from_episode(ep, adv.tolist()) for ep, adv in zip(episodes, advantages, strict=True)]
    assert_conformant(case, records)


@pytest.mark.parametrize("seed", [2**32 - 1, 2**32, 2**40, 2**64 + 5], ids=["max", "2**32", "2**40", "2**64+5"])
def test_seeds_past_the_servers_range_are_folded_into_it(shared_server, seed: int) -> None:
    """OpenEnv envs seed numpy (0 <= seed < 2**32; this one refuses others as maze does): gem's 64-bit seeds fold."""
    server = shared_server(native="target", sessions=8)
    with remote(server.url) as env:
        obs, info = env.reset(seed=seed)
        sent = info.get("openenv_seed", seed)
        assert 0 <= sent < 2**32 and (sent == seed) == (seed < 2**32)
        assert sent == env.unwrapped.wire_seed(seed)  # type: ignore[attr-defined]
        assert obs == seen(f"reach {sent % 7 + 2} from 0", 0, sent % 7 + 2)


def test_success_the_server_reports_comes_through(shared_server) -> None:
    """OpenEnv has no success flag; an env that reports one (here in its metadata) is believed, per episode end."""
    server = shared_server(native="target", sessions=8)
    with remote(server.url) as env:
        env.reset(seed=3)  # target 5
        reached = env.step('{"op": "add", "amount": 5}')
        env.reset(seed=3)
        steps = [env.step('{"op": "sub", "amount": 1}') for _ in range(6)]
    assert reached[2] and reached[4]["success"] is True
    assert "success" not in steps[0][4] and steps[-1][2] and steps[-1][4]["success"] is False
