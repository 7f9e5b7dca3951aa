"""The async multi-agent drivers: seats of a parallel env and independent episodes generate concurrently, bounded."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.episode import EpisodeEngine, Generation, TurnRequest
from gem_core.errors import ConfigError, GenerateCancelled, GenerateTimeout
from gem_core.multiagent.engine import (
    MultiAgentEpisode,
    MultiAgentJob,
    Scripted,
    play_multiagent,
    play_multiagent_async,
    play_multiagent_many,
)
from gem_core.multiagent.reference import NimEnv, RockPaperScissorsEnv
from gem_core.testing_tokenizers import build_chat_tokenizer

#: A guard against a hang if the code under test regresses; never reached by a passing run.
HANG_GUARD_S = 30.0
_MOVES = ("rock", "paper", "scissors")


def _seat(request: TurnRequest) -> str:
    return request.request_id.split("/")[-3]  # "{env_id}/seed={s}/{agent}/turn{t}/r{n}"


def _reply(request: TurnRequest) -> str:
    """A deterministic move from who asks and when (same reply whatever the schedule)."""
    key = sum(map(ord, _seat(request))) + 7 * request.turn + 3 * (request.seed or 0)
    return _MOVES[key % 3] if "Rock" in (request.env_id or "") else str(1 + key % 3)


class Rendezvous:
    """An async generate that answers only once ``size`` requests are out at the same time."""

    def __init__(self, size: int, key: Any = _seat) -> None:
        self.size, self.key = size, key
        self.waiting: dict[Any, asyncio.Event] = {}
        self.peak = 0

    async def __call__(self, request: TurnRequest) -> str:
        event = asyncio.Event()
        self.waiting[(self.key(request), request.request_id)] = event
        self.peak = max(self.peak, len({k for k, _ in self.waiting}))
        if len({k for k, _ in self.waiting}) >= self.size:
            for other in self.waiting.values():
                other.set()
        await asyncio.wait_for(event.wait(), HANG_GUARD_S)
        del self.waiting[(self.key(request), request.request_id)]
        return _reply(request)


@functools.cache
def _tokenizer() -> Any:
    return build_chat_tokenizer("chatml")


def _records(result: MultiAgentEpisode) -> dict[str, list[tuple[Any, ...]]]:
    return {
        agent: [
            (t.observation, t.action, t.reward, t.terminated, t.truncated, t.next_observation, t.prompt_token_ids)
            for t in episode.turns
        ]
        + [(episode.metadata["outcome"], episode.metadata["seat_return"], episode.start_state_id)]
        for agent, episode in result.episodes.items()
    }


def test_a_parallel_envs_seats_are_asked_at_once() -> None:
    # Each seat's request waits for the other's: asked one after the other, the first would wait forever.
    generate = Rendezvous(2)
    result = asyncio.run(
        play_multiagent_async(EpisodeEngine(), RockPaperScissorsEnv(rounds=2), generate, seed=0, request_timeout=5)
    )
    assert generate.peak == 2
    assert [len(e.turns) for e in result.episodes.values()] == [2, 2]


def test_independent_episodes_generate_concurrently() -> None:
    generate = Rendezvous(4, key=lambda r: r.request_id.split("/")[1])  # one key per episode (its seed)
    jobs = [MultiAgentJob(NimEnv(low=6, high=6), seed=s, env_id="core:Nim-v0") for s in range(4)]
    results = asyncio.run(play_multiagent_many(EpisodeEngine(), jobs, generate, request_timeout=5))
    assert generate.peak == 4
    assert all(r.error is None and r.outcomes["first"] in ("win", "loss") for r in results)


@pytest.mark.parametrize("bound", [1, 2, 3], ids=lambda b: f"max_in_flight={b}")
def test_max_in_flight_bounds_the_episodes_at_once(bound: int) -> None:
    out: dict[str, int] = {}  # episode -> its requests not yet answered (Nim: one seat acts at a time)
    peak = 0

    async def generate(request: TurnRequest) -> str:
        nonlocal peak
        episode = request.request_id.split("/")[1]
        out[episode] = out.get(episode, 0) + 1
        peak = max(peak, sum(1 for n in out.values() if n))
        for _ in range(3):  # let the other episodes run meanwhile
            await asyncio.sleep(0)
        out[episode] -= 1
        return _reply(request)

    jobs = [MultiAgentJob(NimEnv(low=5, high=5), seed=s) for s in range(6)]
    results = asyncio.run(play_multiagent_many(EpisodeEngine(), jobs, generate, max_in_flight=bound))
    assert peak == bound
    assert all(r.error is None for r in results)


@settings(max_examples=25, deadline=None)
@given(
    parallel=st.booleans(),
    seeds=st.lists(st.integers(0, 50), min_size=1, max_size=4, unique=True),
    delays=st.lists(st.integers(0, 4), min_size=1, max_size=16),
    in_flight=st.one_of(st.none(), st.integers(1, 3)),
    tokens=st.booleans(),
)
def test_concurrency_keeps_the_sequential_records(
    parallel: bool, seeds: list[int], delays: list[int], in_flight: int | None, tokens: bool
) -> None:
    """Whatever the schedule (random yields per request), each episode is the one play_multiagent plays."""
    tokenizer = _tokenizer() if tokens else None
    engine = EpisodeEngine(tokenizer)
    env_id = "core:RockPaperScissors-v0" if parallel else "core:Nim-v0"

    def answer(request: TurnRequest) -> str | Generation:
        text = _reply(request)
        if tokenizer is None:
            return text
        return Generation(token_ids=[*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id])

    calls = iter(range(10**6))

    async def agenerate(request: TurnRequest) -> str | Generation:
        for _ in range(delays[next(calls) % len(delays)]):
            await asyncio.sleep(0)
        return answer(request)

    def make() -> Any:
        return RockPaperScissorsEnv(rounds=3) if parallel else NimEnv(low=4, high=9)

    expected = [_records(play_multiagent(engine, make(), answer, seed=s, env_id=env_id)) for s in seeds]
    jobs = [MultiAgentJob(make(), seed=s, env_id=env_id) for s in seeds]
    got = asyncio.run(play_multiagent_many(engine, jobs, agenerate, max_in_flight=in_flight))
    assert [r.error for r in got] == [None] * len(seeds)
    assert [_records(r) for r in got] == expected


def test_a_request_without_answer_times_out() -> None:
    async def generate(request: TurnRequest) -> str:
        if _seat(request) == "player_1":
            await asyncio.Event().wait()  # never answers
        return "rock"

    env = RockPaperScissorsEnv()
    with pytest.raises(GenerateTimeout, match=r"player_1.*request_timeout=0\.05") as info:
        asyncio.run(play_multiagent_async(EpisodeEngine(), env, generate, seed=3, request_timeout=0.05))
    assert info.value.request_ids and "player_1" in info.value.request_ids[0]
    assert info.value.episodes == ["RockPaperScissorsEnv seed=3 turn=0"]


def test_a_failing_seat_cancels_the_request_of_the_seat_asked_with_it() -> None:
    cancelled: list[str] = []

    async def generate(request: TurnRequest) -> str:
        if _seat(request) == "player_1":
            raise ValueError("the server broke")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(_seat(request))
            raise
        return "rock"

    with pytest.raises(ValueError, match="the server broke"):
        asyncio.run(
            play_multiagent_async(EpisodeEngine(), RockPaperScissorsEnv(), generate, request_timeout=HANG_GUARD_S)
        )
    assert cancelled == ["player_0"]


def test_a_timeout_stays_in_its_episode() -> None:
    async def generate(request: TurnRequest) -> str:
        if request.seed == 1 and request.turn == 1:
            await asyncio.Event().wait()
        return _reply(request)

    jobs = [MultiAgentJob(NimEnv(low=9, high=9), seed=s, env_id="core:Nim-v0") for s in range(3)]
    results = asyncio.run(play_multiagent_many(EpisodeEngine(), jobs, generate, request_timeout=0.05))
    assert [type(r.error) for r in results] == [type(None), GenerateTimeout, type(None)]
    assert {s.end_reason for s in results[1].sessions.values()} == {"error"}
    assert {s.end_reason for r in (results[0], results[2]) for s in r.sessions.values()} == {"env"}
    assert all(r.outcomes["first"] in ("win", "loss") for r in (results[0], results[2]))


def test_a_generate_that_cancels_itself_is_a_typed_error() -> None:
    async def generate(request: TurnRequest) -> str:
        raise asyncio.CancelledError

    with pytest.raises(GenerateCancelled, match="CancelledError"):
        asyncio.run(play_multiagent_async(EpisodeEngine(), NimEnv(), generate, seed=0))


@pytest.mark.parametrize("in_flight", [1, 2, 3], ids=["one-started", "two-started", "all-started"])
def test_cancelling_the_call_cancels_every_request(in_flight: int) -> None:
    """Every request in flight is cancelled with the call, whichever had started (under load the three
    episodes' first requests start at different times)."""
    started: list[str] = []
    cancelled: list[str] = []
    enough_started = asyncio.Event()

    async def generate(request: TurnRequest) -> str:
        started.append(request.request_id)
        if len(started) == in_flight:
            enough_started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(request.request_id)
            raise
        return "1"

    async def main() -> None:
        jobs = [MultiAgentJob(NimEnv(), seed=s) for s in range(3)]
        task = asyncio.ensure_future(play_multiagent_many(EpisodeEngine(), jobs, generate))
        await asyncio.wait_for(enough_started.wait(), HANG_GUARD_S)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(3):
            await asyncio.sleep(0)  # a request the cancelled call still issued would start here

    asyncio.run(main())
    assert len(started) >= in_flight and sorted(cancelled) == sorted(started)


def test_scripted_seats_play_in_the_async_driver() -> None:
    async def take_one(request: TurnRequest) -> str:
        return "1"

    def optimal(env: Any, agent: str, observation: str) -> str:
        return str(env.unwrapped.optimal_move())

    result = asyncio.run(
        play_multiagent_async(EpisodeEngine(), NimEnv(low=5, high=5), {"first": take_one, "second": Scripted(optimal)})
    )
    assert set(result.episodes) == {"first"} and result.returns == {"first": -1.0, "second": 1.0}


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), True, "5"], ids=repr)
def test_a_bad_request_timeout_is_refused(timeout: Any) -> None:
    async def generate(request: TurnRequest) -> str:
        return "1"

    with pytest.raises(ConfigError, match="request_timeout"):
        asyncio.run(play_multiagent_async(EpisodeEngine(), NimEnv(), generate, request_timeout=timeout))


@pytest.mark.parametrize("bound", [0, -2, True], ids=repr)
def test_a_bad_max_in_flight_is_refused(bound: Any) -> None:
    async def generate(request: TurnRequest) -> str:
        return "1"

    with pytest.raises(ConfigError, match="max_in_flight"):
        asyncio.run(play_multiagent_many(EpisodeEngine(), [MultiAgentJob(NimEnv())], generate, max_in_flight=bound))


def test_jobs_sharing_an_env_are_refused() -> None:
    async def generate(request: TurnRequest) -> str:
        return "1"

    env = NimEnv()
    with pytest.raises(ConfigError, match="share one env"):
        asyncio.run(play_multiagent_many(EpisodeEngine(), [MultiAgentJob(env), MultiAgentJob(env, seed=1)], generate))
