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
import threading
import time
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
from gem_core.errors import (
    ConfigError,
    GenerateCancelled,
    GenerateContractError,
    GenerateTimeout,
    PolicyLagError,
    PolicyVersionError,
    SharedEnvError,
    WeightUpdateTimeout,
)
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
            return Generation(
                token_ids=ids[:cut], logprobs=logprobs[:cut], finish_reason="abort", request_id=request.request_id
            )
        return Generation(
            token_ids=ids, logprobs=logprobs, finish_reason=full.finish_reason, request_id=request.request_id
        )

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


# --------------------------------------------------------------------------- bounds and contracts under faults

#: Bounds the fault tests run under: small, so a hung request costs a fraction of a second.
REQUEST_TIMEOUT = 0.4
ABORT_TIMEOUT = 0.05
#: How long a request that ignores an abort takes to answer anyway (past ABORT_TIMEOUT, within REQUEST_TIMEOUT).
DEAF_S = 0.15
#: A run that has not ended by then hangs: the test fails instead of waiting.
HANG_BOUND_S = 60.0
FAULTS = ["hang", "cancel", "raise", "reorder", "duplicate", "ignore-abort", "wrong-version"]


class FaultServer:
    """The scripted policy behind a fault schedule, on each of the scheduler's three engine kinds.

    ``faults[(episode, turn)]`` is what the first request of that turn gets: ``hang`` (never
    answers), ``cancel`` (raises ``CancelledError``), ``raise``, ``reorder`` / ``duplicate``
    (a batch's answers rotated / one answer twice; a lone request answers with another
    request's id), ``ignore-abort`` (answers late, deaf to aborts), ``wrong-version`` (reports
    a version the engine has not reached). Well-behaved requests obey the abort of a weight
    update: they answer ``"abort"`` with a random prefix (resumed: partial rollouts).
    """

    def __init__(self, case: ConformanceCase, engine: EpisodeEngine, faults: dict[tuple[int, int], str], seed: int):
        self.scripted = ScriptedServer(case, random.Random(seed), 0.002)
        self.rng, self.engine, self.faults = random.Random(seed + 1), engine, faults
        self.injected: dict[int, list[str]] = {}  # episode -> the faults its requests got, in order
        self.raised: dict[int, BaseException] = {}
        self.aborting = threading.Event()  # set by the abort hook, cleared by the swap hook
        self.released = threading.Event()  # ends the offline engine's hung threads when the test is over

    def fault_of(self, request: TurnRequest) -> str | None:
        kind = None if request.resume_from else self.faults.get((request.episode_index, request.turn))
        if kind is not None:
            self.injected.setdefault(request.episode_index, []).append(kind)
        return kind

    def abort(self) -> None:
        self.aborting.set()

    def swap(self) -> None:
        self.aborting.clear()

    def answers(
        self, requests: list[TurnRequest], kinds: list[str | None], aborted: bool, lone: bool = False
    ) -> list[Any]:
        out: list[Any] = []
        for request, kind in zip(requests, kinds, strict=True):
            answer = self.scripted.answer(request)
            ids = answer.token_ids or []
            if aborted and kind != "ignore-abort" and ids:
                cut = self.rng.randrange(len(ids))
                answer = dataclasses.replace(
                    answer, token_ids=ids[:cut], logprobs=(answer.logprobs or [])[:cut], finish_reason="abort"
                )
            if kind == "wrong-version":
                answer.policy_version = self.engine.policy_version + 3
            out.append(answer)
        for i, kind in enumerate(kinds):
            if lone and kind in ("reorder", "duplicate"):  # a lone request answered with another one's id
                out = [dataclasses.replace(out[0], request_id="another")]
            elif kind == "reorder":
                out = out[1:] + out[:1] if len(out) > 1 else [dataclasses.replace(out[0], request_id="another")]
            elif kind == "duplicate":
                if len(out) > 1:
                    out[i] = out[(i + 1) % len(out)]
                else:
                    out.append(out[0])
        return out

    def failure(self, requests: list[TurnRequest], kinds: list[str | None]) -> BaseException | None:
        if "cancel" in kinds:
            return asyncio.CancelledError()
        if "raise" in kinds:
            error = InjectedFault((requests[kinds.index("raise")].episode_index, "generate", requests[0].turn))
            self.raised.update({r.episode_index: error for r in requests})
            return error
        return None

    async def _wait_or_abort(self, deaf: bool) -> bool:
        """Sleep a random latency; whether an abort came meanwhile (a deaf request sleeps past aborts)."""
        if deaf:
            await asyncio.sleep(DEAF_S)
            return False
        for _ in range(self.rng.randrange(4)):
            if self.aborting.is_set():
                return True
            await asyncio.sleep(0.001)
        return self.aborting.is_set()

    async def generate(self, request: TurnRequest) -> Any:
        return (await self.generate_batch([request], lone=True))[0]

    async def generate_batch(self, requests: list[TurnRequest], lone: bool = False) -> list[Any]:
        kinds = [self.fault_of(r) for r in requests]
        if "hang" in kinds:
            await asyncio.Event().wait()
        aborted = await self._wait_or_abort("ignore-abort" in kinds)
        failure = self.failure(requests, kinds)
        if failure is not None:
            raise failure
        out = self.answers(requests, kinds, aborted, lone)
        return out[0:1] if lone else out

    def generate_blocking(self, requests: list[TurnRequest]) -> list[Any]:
        kinds = [self.fault_of(r) for r in requests]
        if "hang" in kinds:
            self.released.wait(HANG_BOUND_S)
            return []
        if "ignore-abort" in kinds:
            time.sleep(DEAF_S)
            aborted = False
        else:
            aborted = self.aborting.wait(self.rng.random() * 0.003)
        failure = self.failure(requests, kinds)
        if failure is not None:
            raise failure
        return self.answers(requests, kinds, aborted)

    def engine_kwargs(self, engine_kind: str) -> dict[str, Any]:
        if engine_kind == "per-request":
            return {"generate": self.generate}
        if engine_kind == "batched-async":
            return {"batch_generate": self.generate_batch, "max_concurrent_calls": 2}
        return {"batch_generate": self.generate_blocking, "max_batch": 2}


class CountingEnv(SlowEnv):
    """Counts resets and closes (an env started, an env closed)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resets = self.closes = 0

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        self.resets += 1
        return await super().reset(seed=seed, options=options)

    async def close(self) -> None:
        self.closes += 1
        await super().close()


def text_of(error: BaseException) -> str:
    """An error's message and notes (where a batched call names its episodes)."""
    return "\n".join([str(error), *getattr(error, "__notes__", [])])


FAULT_ERRORS: dict[str, tuple[type[BaseException], ...]] = {
    "hang": (GenerateTimeout,),
    "cancel": (GenerateCancelled,),
    "raise": (InjectedFault,),
    "reorder": (GenerateContractError,),
    "duplicate": (GenerateContractError,),
    "ignore-abort": (GenerateTimeout,),
    "wrong-version": (GenerateContractError,),
}


def fault_case(engine_kind: str, faults: dict[tuple[int, int], str], seed: int, max_in_flight: int) -> Any:
    case = dataclasses.replace(CASE_BY_NAME["bisect"], seeds=(0, 1, 2, 3, 4, 5))
    engine = EpisodeEngine(case.tokenizer(), dataclasses.replace(case.limits, max_resumes=64))
    server = FaultServer(case, engine, faults, seed)
    scheduler = RolloutScheduler(
        engine,
        max_in_flight=max_in_flight,
        request_timeout=REQUEST_TIMEOUT,
        abort_timeout=ABORT_TIMEOUT,
        close_envs=True,
        **server.engine_kwargs(engine_kind),
    )
    rng = random.Random(seed)
    envs = [CountingEnv(case.make_env(), rng, 0.002) for _ in case.seeds]
    jobs = [EpisodeJob(env=env, env_id=case.env_id, seed=s) for env, s in zip(envs, case.seeds, strict=True)]
    return case, server, scheduler, envs, jobs


@settings(max_examples=30, deadline=None)
@given(
    engine_kind=st.sampled_from(ENGINES),
    faults=st.dictionaries(
        st.tuples(st.integers(0, 5), st.integers(0, 3)), st.sampled_from(FAULTS), min_size=1, max_size=4
    ),
    updates=st.integers(0, 4),
    max_in_flight=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_every_episode_is_accounted_for_once_and_never_silently_wrong_under_any_fault_schedule(
    engine_kind: str, faults: dict[tuple[int, int], str], updates: int, max_in_flight: int, seed: int
) -> None:
    case, server, scheduler, envs, jobs = fault_case(engine_kind, faults, seed, max_in_flight)
    expected = [record_from_episode(ep) for ep in reference_episodes(case)]

    async def run() -> list[EpisodeSession]:
        async def trainer() -> None:  # weight updates with an abort while the episodes play
            for _ in range(updates):
                await asyncio.sleep(0.003)
                await scheduler.update_policy(abort=server.abort, swap=server.swap)

        update_task = asyncio.create_task(trainer())
        try:
            return await scheduler.play_all(jobs)
        finally:
            await update_task

    try:
        sessions = asyncio.run(asyncio.wait_for(run(), HANG_BOUND_S))  # a hang fails the test, never blocks it
    finally:
        server.released.set()
        scheduler.close()
    assert [s.index for s in sessions] == list(range(len(case.seeds)))  # each episode exactly once
    assert [env.closes for env in envs] == [1] * len(envs)  # close_envs: each env closed once
    assert scheduler.stats.episodes == len(case.seeds)
    for session, want in zip(sessions, expected, strict=True):
        kinds = server.injected.get(session.index, [])
        if session.end_reason != "error":  # untouched, or a deaf request that answered before any abort
            assert set(kinds) <= {"ignore-abort"}
            assert record_from_episode(session.episode()) == want
            continue
        error = session.error
        assert error is not None and session.metadata["error_phase"] == "generate"
        assert f"seed={session.seed} " in text_of(error)  # the error names the episode
        if engine_kind == "per-request":  # one request, one fault: the error is that fault's
            assert kinds and isinstance(error, FAULT_ERRORS[kinds[-1]])
            if kinds[-1] == "raise":
                assert error is server.raised[session.index]
        actions = [t.action for t in session.turns]  # the finished turns kept as they were
        assert actions == want.actions[: len(actions)]
    for index, kinds in server.injected.items():
        if kinds[-1] != "ignore-abort":  # every fault that was sent fails its episode
            assert sessions[index].end_reason == "error"


@settings(max_examples=20, deadline=None)
@given(
    engine_kind=st.sampled_from(ENGINES),
    stop=st.sampled_from(["cancel", "jobs-raise"]),
    after=st.integers(0, 6),
    hangs=st.sets(st.integers(0, 5), max_size=2),
    close_envs=st.booleans(),
    max_in_flight=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_every_started_episode_is_handed_out_or_closed_when_the_run_stops(
    engine_kind: str, stop: str, after: int, hangs: set[int], close_envs: bool, max_in_flight: int, seed: int
) -> None:
    _case, server, scheduler, envs, jobs = fault_case(engine_kind, {(i, 1): "hang" for i in hangs}, seed, max_in_flight)
    scheduler.close_envs = close_envs
    handed: list[int] = []

    taken: list[int] = []

    def job_stream() -> Iterator[EpisodeJob]:
        for i in range(len(jobs) + 1):
            if stop == "jobs-raise" and i == after:
                raise LookupError("the dataset ran dry")
            if i == len(jobs):
                return
            taken.append(i)
            yield jobs[i]

    async def consume() -> None:
        async for session in scheduler.episodes(job_stream()):
            handed.append(session.index)

    async def run() -> BaseException | None:
        task = asyncio.create_task(consume())
        if stop == "cancel":  # the scheduler is cancelled mid-run (its consumer task is)
            while len(handed) < after and not task.done():
                await asyncio.sleep(0.001)
            task.cancel()
        try:
            await task
        except (asyncio.CancelledError, LookupError) as exc:
            return exc
        return None

    try:
        ended = asyncio.run(asyncio.wait_for(run(), HANG_BOUND_S))
    finally:
        server.released.set()
        scheduler.close()
    assert sorted(handed) == sorted(set(handed))  # never twice
    if stop == "jobs-raise":
        assert isinstance(ended, LookupError)
        assert sorted(handed) == taken == list(range(after))  # every started episode handed out first
    elif ended is None:  # every episode was handed out before the cancel came
        assert sorted(handed) == list(range(len(jobs)))
    else:
        assert isinstance(ended, asyncio.CancelledError)
        assert set(handed) <= set(taken)
        assert scheduler.stats.cancelled == len(taken) - len(handed)
    assert scheduler.stats.episodes == len(handed)
    closed = [env.closes for env in envs]
    if close_envs:  # the handed-out and the cancelled ones alike, once; none that was never taken
        assert closed == [int(i in taken) for i in range(len(envs))]
    else:
        assert closed == [0] * len(envs)


def bisect_jobs(case: ConformanceCase, envs: list[Any] | None = None) -> list[EpisodeJob]:
    envs = envs if envs is not None else [case.make_env() for _ in case.seeds]
    return [EpisodeJob(env=env, env_id=case.env_id, seed=s) for env, s in zip(envs, case.seeds, strict=True)]


@pytest.mark.parametrize("max_in_flight", [2, 4], ids=["two-slots", "four-slots"])
def test_an_env_shared_between_live_jobs_is_refused_at_submission(max_in_flight: int) -> None:
    case = CASE_BY_NAME["bisect"]
    server = ScriptedServer(case, random.Random(0), 0.001)
    scheduler = RolloutScheduler(
        EpisodeEngine(case.tokenizer(), case.limits), generate=server.generate, max_in_flight=max_in_flight
    )
    shared = case.make_env()
    jobs = bisect_jobs(case, [shared, shared, *[case.make_env() for _ in case.seeds[2:]]])
    handed: list[EpisodeSession] = []

    async def run() -> None:
        async for session in scheduler.episodes(jobs):
            handed.append(session)

    try:
        with pytest.raises(SharedEnvError, match=r"job 1 .*seed=1.* live job 0 .*seed=0.*its own env"):
            asyncio.run(run())
    finally:
        scheduler.close()
    assert [s.index for s in handed] == [0]  # the live job played on, untouched, and was handed out first
    assert record_from_episode(handed[0].episode()) == reference("bisect")[0]


def test_one_env_may_serve_jobs_one_after_another() -> None:
    case = CASE_BY_NAME["bisect"]
    server = ScriptedServer(case, random.Random(0), 0.001)
    scheduler = RolloutScheduler(
        EpisodeEngine(case.tokenizer(), case.limits), generate=server.generate, max_in_flight=1
    )
    env = case.make_env()
    try:
        sessions = asyncio.run(scheduler.play_all(bisect_jobs(case, [env] * len(case.seeds))))
    finally:
        scheduler.close()
    assert [record_from_episode(s.episode()) for s in sessions] == list(reference("bisect"))


def test_a_job_that_is_not_an_episode_job_is_refused() -> None:
    case = CASE_BY_NAME["bisect"]
    server = ScriptedServer(case, random.Random(0), 0.0)
    scheduler = RolloutScheduler(EpisodeEngine(case.tokenizer(), case.limits), generate=server.generate)
    try:
        with pytest.raises(ConfigError, match="job 0 is .*, not an EpisodeJob"):
            asyncio.run(scheduler.play_all([case.make_env()]))  # type: ignore[list-item]
    finally:
        scheduler.close()


@pytest.mark.parametrize("version", [2, 5, True, 6.0, "7"], ids=["backwards", "same", "bool", "float", "str"])
def test_policy_versions_only_move_forward(version: Any) -> None:
    case = CASE_BY_NAME["bisect"]
    engine = EpisodeEngine(case.tokenizer(), case.limits)
    scheduler = RolloutScheduler(engine, generate=ScriptedServer(case, random.Random(0), 0.0).generate)

    async def run() -> None:
        assert await scheduler.update_policy(version=5) == 5
        with pytest.raises(PolicyVersionError, match=r"only move forward and the engine is at 5; give an int > 5"):
            await scheduler.update_policy(version=version)
        assert engine.policy_version == 5 and scheduler.stats.updates == 1
        assert await scheduler.update_policy() == 6  # the failed update left the scheduler working

    try:
        asyncio.run(run())
    finally:
        scheduler.close()


@pytest.mark.parametrize("reported", [99, -1], ids=["ahead-of-the-engine", "behind-every-request"])
@pytest.mark.parametrize("engine_kind", ENGINES)
def test_a_version_outside_the_versions_in_flight_fails_its_episode(engine_kind: str, reported: int) -> None:
    case = dataclasses.replace(CASE_BY_NAME["bisect"], seeds=(0, 1, 2))
    engine = EpisodeEngine(case.tokenizer(), case.limits)
    server = ScriptedServer(case, random.Random(0), 0.001)

    def answer(request: TurnRequest) -> Generation:
        generation = server.answer(request)
        if request.episode_index == 1 and request.turn == 0:
            generation.policy_version = reported
        return generation

    async def generate(request: TurnRequest) -> Generation:
        return answer(request)

    async def generate_batch(requests: list[TurnRequest]) -> list[Generation]:
        return [answer(r) for r in requests]

    kwargs: dict[str, Any] = {
        "per-request": {"generate": generate},
        "batched-async": {"batch_generate": generate_batch},
        "batched-offline": {"batch_generate": lambda requests: [answer(r) for r in requests]},
    }[engine_kind]
    scheduler = RolloutScheduler(engine, max_in_flight=3, **kwargs)
    try:
        sessions = asyncio.run(scheduler.play_all(bisect_jobs(case)))
    finally:
        scheduler.close()
    failed = sessions[1]
    assert failed.end_reason == "error" and isinstance(failed.error, GenerateContractError)
    assert f"reports policy_version {reported}" in str(failed.error) and "seed=1 turn=0" in str(failed.error)
    assert [record_from_episode(s.episode()) for s in (sessions[0], sessions[2])] == [
        reference("bisect")[0],
        reference("bisect")[2],
    ]


def test_a_request_that_ignores_the_abort_is_given_up_and_the_update_goes_through() -> None:
    case = dataclasses.replace(CASE_BY_NAME["bisect"], seeds=(0, 1, 2, 3))
    engine = EpisodeEngine(case.tokenizer(), dataclasses.replace(case.limits, max_resumes=8))
    server = ScriptedServer(case, random.Random(0), 0.0)
    aborting = asyncio.Event()
    deaf_sent = asyncio.Event()

    async def generate(request: TurnRequest) -> Generation:
        if (request.episode_index, request.turn) == (2, 1):  # deaf to the abort; answers only when cancelled
            deaf_sent.set()
            await asyncio.Event().wait()
        if aborting.is_set():
            return Generation(token_ids=[], logprobs=[], finish_reason="abort", request_id=request.request_id)
        return server.answer(request)

    scheduler = RolloutScheduler(
        engine, generate=generate, max_in_flight=4, abort_timeout=ABORT_TIMEOUT, request_timeout=HANG_BOUND_S
    )

    async def run() -> tuple[list[EpisodeSession], int]:
        async def trainer() -> int:
            await deaf_sent.wait()
            return await scheduler.update_policy(abort=aborting.set, swap=aborting.clear)

        update = asyncio.create_task(trainer())
        sessions = await scheduler.play_all(bisect_jobs(case))
        return sessions, await update

    try:
        sessions, version = asyncio.run(asyncio.wait_for(run(), HANG_BOUND_S))
    finally:
        scheduler.close()
    assert version == 1 and scheduler.stats.given_up == 1
    error = sessions[2].error
    assert isinstance(error, GenerateTimeout) and error.episodes == [f"{case.env_id} seed=2 turn=1"]
    assert "ignored the abort of the weight update to version 1" in str(error)
    assert error.request_ids and error.request_ids[0] in str(error)
    others = [s for s in sessions if s.index != 2]
    assert [record_from_episode(s.episode()) for s in others] == [reference("bisect")[i] for i in (0, 1, 3)]


@pytest.mark.parametrize("hook", ["abort", "swap"])
def test_a_hook_past_its_bound_fails_the_update_and_requests_flow_again(hook: str) -> None:
    case = CASE_BY_NAME["bisect"]
    engine = EpisodeEngine(case.tokenizer(), case.limits)
    server = ScriptedServer(case, random.Random(0), 0.001)
    scheduler = RolloutScheduler(engine, generate=server.generate, abort_timeout=0.05, swap_timeout=0.05)

    async def hangs() -> None:
        await asyncio.Event().wait()

    async def run() -> list[EpisodeSession]:
        with pytest.raises(WeightUpdateTimeout, match=rf"{hook} hook ran past {hook}_timeout=0.05 s.*stays 0"):
            await scheduler.update_policy(**{hook: hangs})
        return await scheduler.play_all(bisect_jobs(case))

    try:
        sessions = asyncio.run(asyncio.wait_for(run(), HANG_BOUND_S))
    finally:
        scheduler.close()
    assert engine.policy_version == 0 and scheduler.stats.updates == 0
    assert [record_from_episode(s.episode()) for s in sessions] == list(reference("bisect"))


def test_a_request_cancelled_by_its_client_fails_only_its_episode() -> None:
    case = CASE_BY_NAME["bisect"]
    server = ScriptedServer(case, random.Random(0), 0.001)

    async def generate(request: TurnRequest) -> Generation:
        if (request.episode_index, request.turn) == (1, 0):
            raise asyncio.CancelledError  # what a client raises for a request its server aborted
        return await server.generate(request)

    scheduler = RolloutScheduler(EpisodeEngine(case.tokenizer(), case.limits), generate=generate, max_in_flight=2)
    try:
        sessions = asyncio.run(asyncio.wait_for(scheduler.play_all(bisect_jobs(case)), HANG_BOUND_S))
    finally:
        scheduler.close()
    error = sessions[1].error
    assert isinstance(error, GenerateCancelled) and error.episodes == [f"{case.env_id} seed=1 turn=0"]
    assert "finish_reason='abort'" in str(error)
    rest = [s for s in sessions if s.index != 1]
    assert [record_from_episode(s.episode()) for s in rest] == [r for i, r in enumerate(reference("bisect")) if i != 1]


@pytest.mark.parametrize(
    ("answers", "bad"),
    [
        (lambda out: out[::-1], "reordered"),
        (lambda out: [out[0], out[0], *out[2:]], "duplicated"),
        (lambda out: [dataclasses.replace(o, request_id=None) for o in out], "carries no request_id"),
    ],
    ids=["reordered", "duplicated", "no-ids"],
)
def test_a_batch_whose_answers_do_not_match_their_requests_fails_those_episodes(answers: Any, bad: str) -> None:
    case = dataclasses.replace(CASE_BY_NAME["bisect"], seeds=(0, 1, 2))
    server = ScriptedServer(case, random.Random(0), 0.0)
    calls = 0

    async def generate_batch(requests: list[TurnRequest]) -> list[Generation]:
        nonlocal calls
        calls += 1
        out = [server.answer(r) for r in requests]
        return answers(out) if calls == 1 else out  # the first call: all three episodes' first turn

    scheduler = RolloutScheduler(EpisodeEngine(case.tokenizer(), case.limits), batch_generate=generate_batch)
    envs = [to_async(case.make_env(), in_thread=False) for _ in case.seeds]  # reset at once: one first call
    try:
        sessions = asyncio.run(scheduler.play_all(bisect_jobs(case, envs)))
    finally:
        scheduler.close()
    failed = {s.index for s in sessions if s.end_reason == "error"}
    assert failed == ({0, 1} if bad == "duplicated" else {0, 2} if bad == "reordered" else {0, 1, 2})
    for session in sessions:
        if session.index in failed:
            assert isinstance(session.error, GenerateContractError) and not session.turns
            assert f"seed={session.seed} turn=0" in str(session.error)
        else:  # the answer that carried its own id is its own
            assert record_from_episode(session.episode()) == reference("bisect")[session.index]
