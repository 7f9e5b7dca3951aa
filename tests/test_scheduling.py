"""gem_core.scheduling: continuous and partial rollouts play the episodes lockstep plays; faults stay in their episode.

* Conformance: every case of :mod:`gem_core.conformance`, per-request and batched engines,
  continuous and partial (the server aborts generations at random offsets while weight
  updates run), with random latencies of the server and the envs: the records equal the
  lockstep reference (``play_batch``) exactly.
* Faults: random env errors (reset or step, any turn) and generate errors (one request, a
  whole batched call, a broken answer) end only the episodes they hit, each with its own
  exception (the same object, so nothing is misattributed); every other episode equals
  its reference.
* Scheduling: a new episode starts when one ends, env steps overlap generation,
  backpressure holds new episodes while the consumer's buffer is full, weight updates wait
  for the calls in flight, ``max_policy_lag`` replays or fails stale episodes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("transformers", reason="the test extra installs transformers")

from gem_core.conformance import (
    CASES,
    ConformanceCase,
    ConformanceRecord,
    assert_conformant,
    record_from_episode,
    reference_episodes,
    scripted_generation,
)
from gem_core.core import AsyncEnv, Env, ResetReturn, StepReturn, to_async
from gem_core.episode import EpisodeEngine, EpisodeJob, EpisodeSession, Generation, TurnRequest
from gem_core.errors import ConfigError, GenerateContractError, PolicyLagError
from gem_core.rl.advantages import rebn
from gem_core.rl.returns import discounted_returns
from gem_core.scheduling import RolloutScheduler

CASE_BY_NAME = {case.name: case for case in CASES}


class ScriptedServer:
    """The conformance policy as a server: random latency, and (partial mode) random aborts.

    A continuation (``resume_from=k``) is answered as a deterministic model would: the
    reply to the context without the last ``k`` ids, from its ``k``-th token on (checked
    to extend exactly the ids the engine sent back).
    """

    def __init__(self, case: ConformanceCase, rng: random.Random, latency: float, abort_p: float = 0.0) -> None:
        self.case, self.rng, self.latency, self.abort_p = case, rng, latency, abort_p
        self.tokenizer = case.tokenizer()
        self.in_flight = 0
        self.aborts = 0

    def answer(self, request: TurnRequest) -> Generation:
        prompt, done = request.prompt_ids or [], request.resume_from
        context = prompt[: len(prompt) - done]
        cap = None if request.max_tokens is None else request.max_tokens + done
        full = scripted_generation(self.case, self.tokenizer, context, cap)
        assert full.token_ids is not None and full.logprobs is not None
        assert full.token_ids[:done] == prompt[len(context) :], "a continuation must extend the ids sent back"
        ids, logprobs = full.token_ids[done:], full.logprobs[done:]
        if ids and self.rng.random() < self.abort_p:
            self.aborts += 1
            cut = self.rng.randrange(len(ids))
            return Generation(token_ids=ids[:cut], logprobs=logprobs[:cut], finish_reason="abort")
        return Generation(token_ids=ids, logprobs=logprobs, finish_reason=full.finish_reason)

    async def pause(self) -> None:
        self.in_flight += 1
        try:
            await asyncio.sleep(self.rng.random() * self.latency)
        finally:
            self.in_flight -= 1

    async def generate(self, request: TurnRequest) -> Generation:
        await self.pause()
        return self.answer(request)

    async def generate_batch(self, requests: list[TurnRequest]) -> list[Generation]:
        await self.pause()
        return [self.answer(r) for r in requests]

    def generate_batch_blocking(self, requests: list[TurnRequest]) -> list[Generation]:
        return [self.answer(r) for r in requests]  # an offline engine: runs in the scheduler's worker thread


class SlowEnv(AsyncEnv):
    """An env behind a random step latency (a grader, a tool server) that counts the generate calls it overlaps."""

    def __init__(self, env: Env, rng: random.Random, latency: float, server: ScriptedServer | None = None) -> None:
        self.inner_env = to_async(env, in_thread=False)
        self.spec = env.spec
        self.rng, self.latency, self.server = rng, latency, server
        self.overlaps: list[int] = []

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        await asyncio.sleep(self.rng.random() * self.latency)
        return await self.inner_env.reset(seed=seed, options=options)

    async def step(self, action: str) -> StepReturn:
        if self.server is not None:
            self.overlaps.append(self.server.in_flight)
        await asyncio.sleep(self.rng.random() * self.latency)
        return await self.inner_env.step(action)

    async def close(self) -> None:
        await self.inner_env.close()


@functools.cache
def reference(name: str) -> tuple[ConformanceRecord, ...]:
    """The case's lockstep episodes as records without advantages (those are checked by the suite itself)."""
    return tuple(record_from_episode(ep) for ep in reference_episodes(CASE_BY_NAME[name]))


def with_rebn(case: ConformanceCase, sessions: list[EpisodeSession]) -> list[ConformanceRecord]:
    import numpy as np

    episodes = [s.episode() for s in sessions]
    returns = [discounted_returns(ep, case.gamma) for ep in episodes]
    split = np.split(rebn(np.concatenate(returns)), np.cumsum([len(r) for r in returns])[:-1])
    return [record_from_episode(ep, adv.tolist()) for ep, adv in zip(episodes, split, strict=True)]


def run_case(
    case: ConformanceCase,
    *,
    engine_kind: str,
    partial: bool,
    rng_seed: int,
    max_in_flight: int,
    latency: float = 0.002,
    updates: int = 0,
) -> tuple[list[EpisodeSession], RolloutScheduler, ScriptedServer]:
    rng = random.Random(rng_seed)
    limits = dataclasses.replace(case.limits, max_resumes=64) if partial else case.limits
    engine = EpisodeEngine(case.tokenizer(), limits)
    server = ScriptedServer(case, rng, latency, abort_p=0.3 if partial else 0.0)
    engines: dict[str, dict[str, Any]] = {
        "per-request": {"generate": server.generate},
        "batched-async": {"batch_generate": server.generate_batch, "max_concurrent_calls": 2},
        "batched-offline": {"batch_generate": server.generate_batch_blocking, "max_batch": 2},
    }
    scheduler = RolloutScheduler(engine, max_in_flight=max_in_flight, **engines[engine_kind])
    jobs = [
        EpisodeJob(env=SlowEnv(case.make_env(), rng, latency), env_id=case.env_id, seed=seed) for seed in case.seeds
    ]

    async def run() -> list[EpisodeSession]:
        async def trainer() -> None:  # weight updates while the episodes play
            for _ in range(updates):
                await asyncio.sleep(rng.random() * latency)
                await scheduler.update_policy()

        update_task = asyncio.create_task(trainer())
        try:
            return await scheduler.play_all(jobs)
        finally:
            await update_task

    try:
        return asyncio.run(run()), scheduler, server
    finally:
        scheduler.close()
        for job in jobs:
            asyncio.run(job.env.close())  # type: ignore[misc]


ENGINES = ["per-request", "batched-async", "batched-offline"]


@pytest.mark.parametrize("partial", [False, True], ids=["continuous", "partial"])
@pytest.mark.parametrize("engine_kind", ENGINES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_conformance(case: ConformanceCase, engine_kind: str, partial: bool) -> None:
    sessions, scheduler, server = run_case(
        case, engine_kind=engine_kind, partial=partial, rng_seed=0, max_in_flight=2, updates=5 if partial else 0
    )
    assert_conformant(case, with_rebn(case, sessions))
    assert all(s.end_reason != "error" for s in sessions)
    if partial:
        assert scheduler.stats.resumed == server.aborts  # every abort resumed, none lost
        resumed = [t.resumed_at for s in sessions for t in s.turns if t.resumed_at]
        assert sum(map(len, resumed)) == server.aborts
    for session in sessions:
        for turn in session.turns:
            versions = turn.policy_versions
            assert versions is not None and len(versions) == len(turn.action_token_ids or [])
            assert versions == sorted(versions)  # a resumed turn's later tokens come from newer weights
            assert versions[-1] <= scheduler.engine.policy_version


@settings(max_examples=12, deadline=None)
@given(
    name=st.sampled_from(sorted(CASE_BY_NAME)),
    engine_kind=st.sampled_from(ENGINES),
    partial=st.booleans(),
    rng_seed=st.integers(0, 2**16),
    max_in_flight=st.integers(1, 4),
    latency=st.sampled_from([0.0, 0.001, 0.004]),
    updates=st.integers(0, 6),
)
def test_any_latencies_and_orders_give_the_lockstep_episodes(
    name: str, engine_kind: str, partial: bool, rng_seed: int, max_in_flight: int, latency: float, updates: int
) -> None:
    sessions, _, _ = run_case(
        CASE_BY_NAME[name],
        engine_kind=engine_kind,
        partial=partial,
        rng_seed=rng_seed,
        max_in_flight=max_in_flight,
        latency=latency,
        updates=updates,
    )
    assert [s.index for s in sessions] == list(range(len(CASE_BY_NAME[name].seeds)))
    assert [record_from_episode(s.episode()) for s in sessions] == list(reference(name))


# --------------------------------------------------------------------------- faults


class InjectedFault(Exception):
    """An injected fault; ``where`` names the episode and the phase it was injected for."""

    def __init__(self, where: tuple[int, str, int]) -> None:
        super().__init__(f"injected into episode {where[0]} at {where[1]} turn {where[2]}")
        self.where = where


class FaultyEnv(SlowEnv):
    def __init__(self, *args: Any, index: int, fault: tuple[str, int] | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.index, self.fault, self.turn = index, fault, 0
        self.raised: InjectedFault | None = None

    def _maybe_raise(self, phase: str) -> None:
        if self.fault == (phase, self.turn):
            self.raised = InjectedFault((self.index, phase, self.turn))
            raise self.raised

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        self._maybe_raise("reset")
        return await super().reset(seed=seed, options=options)

    async def step(self, action: str) -> StepReturn:
        self._maybe_raise("step")
        self.turn += 1
        return await super().step(action)


@settings(max_examples=15, deadline=None)
@given(
    engine_kind=st.sampled_from(ENGINES),
    rng_seed=st.integers(0, 2**16),
    max_in_flight=st.integers(1, 4),
    env_faults=st.dictionaries(st.integers(0, 5), st.tuples(st.sampled_from(["reset", "step"]), st.integers(0, 3))),
    generate_faults=st.dictionaries(
        st.integers(0, 5), st.tuples(st.sampled_from(["raise", "contract"]), st.integers(0, 3))
    ),
    batch_fault=st.none() | st.integers(0, 6),
)
def test_a_fault_fails_only_its_episode_with_its_own_error(
    engine_kind: str,
    rng_seed: int,
    max_in_flight: int,
    env_faults: dict[int, tuple[str, int]],
    generate_faults: dict[int, tuple[str, int]],
    batch_fault: int | None,
) -> None:
    case = dataclasses.replace(CASE_BY_NAME["bisect"], seeds=(0, 1, 2, 3, 4, 5))
    expected = [record_from_episode(ep) for ep in reference_episodes(case)]
    rng = random.Random(rng_seed)
    engine = EpisodeEngine(case.tokenizer(), case.limits)
    server = ScriptedServer(case, rng, 0.002)
    raised: dict[int, BaseException] = {}  # episode -> the exception injected into it
    calls = 0

    def answer(request: TurnRequest) -> Any:
        fault = generate_faults.get(request.episode_index)
        if fault is not None and fault[1] == request.turn:
            if fault[0] == "contract":
                return Generation(token_ids=[-1])  # outside the vocabulary: the engine's typed error
            raised[request.episode_index] = InjectedFault((request.episode_index, "generate", request.turn))
            raise raised[request.episode_index]
        return server.answer(request)

    async def generate(request: TurnRequest) -> Any:
        await server.pause()
        return answer(request)

    async def generate_batch(requests: list[TurnRequest]) -> list[Any]:
        nonlocal calls
        await server.pause()
        calls += 1
        if calls - 1 == batch_fault:  # the whole call fails: each of its episodes, no other
            error = InjectedFault((-1, "batch", calls - 1))
            raised.update({r.episode_index: error for r in requests})
            raise error
        out: list[Any] = []
        for r in requests:
            try:
                out.append(answer(r))
            except InjectedFault as exc:  # one request failing fails its call; keep the test's per-episode view
                out.append(exc)
        return out

    if engine_kind == "per-request":
        kwargs: dict[str, Any] = {"generate": generate}
    else:

        async def batched(requests: list[TurnRequest]) -> list[Any]:
            outputs = await generate_batch(requests)
            bad = [o for o in outputs if isinstance(o, InjectedFault)]
            if bad:  # one failed request fails its call, as an engine's batch call would
                raised.update({r.episode_index: bad[0] for r in requests})
                raise bad[0]
            return outputs

        kwargs = {"batch_generate": batched, "max_batch": 3 if engine_kind == "batched-offline" else None}
    scheduler = RolloutScheduler(engine, max_in_flight=max_in_flight, **kwargs)
    envs = [FaultyEnv(case.make_env(), rng, 0.002, index=i, fault=env_faults.get(i)) for i in range(len(case.seeds))]
    jobs = [EpisodeJob(env=env, env_id=case.env_id, seed=seed) for env, seed in zip(envs, case.seeds, strict=True)]
    try:
        sessions = asyncio.run(scheduler.play_all(jobs))
    finally:
        scheduler.close()
    assert [s.index for s in sessions] == list(range(len(case.seeds)))
    for session, want, env in zip(sessions, expected, envs, strict=True):
        if session.end_reason != "error":
            assert session.index not in raised and env.raised is None
            assert record_from_episode(session.episode()) == want  # untouched by the others' faults
            continue
        error, phase = session.error, session.metadata["error_phase"]
        if phase in ("reset", "step"):
            assert error is env.raised  # its own env's exception, not another episode's
        elif isinstance(error, GenerateContractError):
            assert generate_faults[session.index][0] == "contract" and phase == "generate"
            assert f"seed={case.seeds[session.index]}" in str(error)
        else:
            assert error is raised[session.index] and phase == "generate"
        actions = [t.action for t in session.turns]  # the finished turns are kept as they were
        assert actions == want.actions[: len(actions)]
        assert [t.reward for t in session.turns] == want.rewards[: len(actions)]


# --------------------------------------------------------------------------- scheduling


def numberguess_jobs(case: ConformanceCase, count: int, started: list[int]) -> Iterator[EpisodeJob]:
    """A lazy job stream that notes when each job is taken (an episode starts)."""
    for i in range(count):
        started.append(i)
        yield EpisodeJob(env=case.make_env(), env_id=case.env_id, seed=i)


def test_backpressure_holds_new_episodes_while_the_buffer_is_full() -> None:
    case = CASE_BY_NAME["bisect"]
    server = ScriptedServer(case, random.Random(0), 0.0)
    scheduler = RolloutScheduler(
        EpisodeEngine(case.tokenizer(), case.limits), generate=server.generate, max_in_flight=2, buffer_size=1
    )
    started: list[int] = []

    async def run() -> tuple[int, int]:
        stream = scheduler.episodes(numberguess_jobs(case, 20, started))
        await stream.__anext__()
        for _ in range(50):  # a consumer that does not read: the scheduler runs out of room
            await asyncio.sleep(0.001)
        held = len(started)
        rest = [s async for s in stream]
        return held, 1 + len(rest)

    try:
        held, total = asyncio.run(run())
    finally:
        scheduler.close()
    # 1 read + 1 in the buffer + 2 finished holding their slots, +1 taken from the stream waiting for a slot
    assert held <= 1 + 1 + 2 + 1
    assert total == 20 and scheduler.stats.episodes == 20


def test_env_steps_overlap_other_episodes_generation() -> None:
    case = CASE_BY_NAME["bisect"]
    rng = random.Random(1)
    server = ScriptedServer(case, rng, 0.003)
    scheduler = RolloutScheduler(
        EpisodeEngine(case.tokenizer(), case.limits), generate=server.generate, max_in_flight=4
    )
    envs = [SlowEnv(case.make_env(), rng, 0.003, server=server) for _ in range(8)]
    jobs = [EpisodeJob(env=env, env_id=case.env_id, seed=i) for i, env in enumerate(envs)]
    try:
        asyncio.run(scheduler.play_all(jobs))
    finally:
        scheduler.close()
    assert max(n for env in envs for n in env.overlaps) > 0  # some env step ran while requests were in flight


def test_sync_envs_step_in_the_schedulers_threads() -> None:
    case = CASE_BY_NAME["bisect"]
    server = ScriptedServer(case, random.Random(0), 0.0)
    scheduler = RolloutScheduler(
        EpisodeEngine(case.tokenizer(), case.limits), generate=server.generate, max_in_flight=3, close_envs=True
    )
    jobs = [EpisodeJob(env=case.make_env(), env_id=case.env_id, seed=s) for s in case.seeds]
    try:
        sessions = asyncio.run(scheduler.play_all(jobs))
    finally:
        scheduler.close()
    assert [record_from_episode(s.episode()) for s in sessions] == list(reference("bisect"))


def test_a_weight_update_waits_for_the_requests_in_flight_and_stamps_versions() -> None:
    case = CASE_BY_NAME["16-turns"]
    engine = EpisodeEngine(case.tokenizer(), case.limits)
    server = ScriptedServer(case, random.Random(0), 0.002)
    seen: list[tuple[int, int]] = []

    async def generate(request: TurnRequest) -> Generation:
        version = engine.policy_version
        answer = await server.generate(request)
        seen.append((version, engine.policy_version))
        return answer

    scheduler = RolloutScheduler(engine, generate=generate, max_in_flight=2)
    swaps: list[int] = []

    async def run() -> list[EpisodeSession]:
        async def trainer() -> None:
            for _ in range(4):
                await asyncio.sleep(0.003)
                await scheduler.update_policy(swap=lambda: swaps.append(server.in_flight))

        task = asyncio.create_task(trainer())
        sessions = await scheduler.play_all(
            EpisodeJob(env=case.make_env(), env_id=case.env_id, seed=s) for s in case.seeds
        )
        await task
        return sessions

    try:
        sessions = asyncio.run(run())
    finally:
        scheduler.close()
    assert swaps == [0, 0, 0, 0]  # weights swapped with nothing in flight
    assert all(before == after for before, after in seen)  # no request straddled an update
    versions = {v for s in sessions for t in s.turns for v in t.policy_versions or []}
    assert len(versions) > 1 and engine.policy_version == 4


@pytest.mark.parametrize("on_stale", ["drop", "raise"])
def test_max_policy_lag_replays_or_fails_stale_episodes(on_stale: str) -> None:
    case = CASE_BY_NAME["16-turns"]
    limits = dataclasses.replace(case.limits, max_policy_lag=1, on_stale=on_stale)
    engine = EpisodeEngine(case.tokenizer(), limits)
    server = ScriptedServer(case, random.Random(0), 0.0)
    scheduler: RolloutScheduler
    updates = iter(range(3))

    async def generate(request: TurnRequest) -> Generation:
        answer = await server.generate(request)
        if request.episode_index == 0 and request.turn == 3 and next(updates, None) is not None:
            engine.policy_version += 2  # a trainer two versions ahead (e.g. it skipped a sync)
        return answer

    scheduler = RolloutScheduler(engine, generate=generate, max_in_flight=1)
    try:
        sessions = asyncio.run(
            scheduler.play_all(EpisodeJob(env=case.make_env(), env_id=case.env_id, seed=s) for s in case.seeds)
        )
    finally:
        scheduler.close()
    if on_stale == "drop":
        assert scheduler.stats.replayed >= 1 and sessions[0].end_reason != "stale"
        assert [record_from_episode(s.episode()) for s in sessions] == list(reference("16-turns"))
    else:
        assert sessions[0].end_reason == "error" and isinstance(sessions[0].error, PolicyLagError)
        assert sessions[0].metadata["error_phase"] == "policy_lag"
        assert sessions[1].end_reason != "error"


def test_a_failing_job_stream_is_raised() -> None:
    case = CASE_BY_NAME["bisect"]
    server = ScriptedServer(case, random.Random(0), 0.0)
    scheduler = RolloutScheduler(EpisodeEngine(case.tokenizer(), case.limits), generate=server.generate)

    def jobs() -> Iterator[EpisodeJob]:
        yield EpisodeJob(env=case.make_env(), env_id=case.env_id, seed=0)
        raise LookupError("the dataset ran dry")

    try:
        with pytest.raises(LookupError, match="ran dry"):
            asyncio.run(scheduler.play_all(jobs()))
    finally:
        scheduler.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of"),
        ({"generate": object(), "batch_generate": object()}, "exactly one of"),
        ({"generate": object(), "max_in_flight": 0}, "max_in_flight must be an int >= 1"),
        ({"generate": object(), "buffer_size": 0}, "buffer_size must be an int >= 1"),
    ],
    ids=["no-engine", "two-engines", "no-slots", "no-buffer"],
)
def test_settings_are_checked(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RolloutScheduler(EpisodeEngine(None), **kwargs)
