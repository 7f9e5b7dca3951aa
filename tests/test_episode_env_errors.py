"""gem_core.episode: ``on_env_error`` — one env that raises never changes the other episodes of a batch.

The property, for both batch drivers (``play_batch`` and concurrent ``play``): for any batch,
any subset of failing episodes, failing at any turn (``reset`` included) with any exception
type, every surviving episode's record equals its record in a batch without the failing
ones, and every failed one is marked (``end_reason == "error"``, the error in its metadata,
the turns before the failure kept, the context back at the prompt of the failed turn).
"""

from __future__ import annotations

import asyncio
import functools
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.core import Env
from gem_core.episode import (
    EpisodeEngine,
    EpisodeJob,
    Generation,
    TurnRequest,
    env_error_report,
    failed_by_env,
)
from gem_core.errors import ConfigError, EnvCheckError, ToolError, TrajectoryError
from gem_core.testing import FaultyEnv, GenericTestEnv, NumberGuessEnv

pytest.importorskip("transformers", reason="the test extra installs transformers")

from gem_core.testing_tokenizers import build_chat_tokenizer

ENV_ID = "core:NumberGuess-v0"
MAX_TURNS = 5


class GraderCrashed(Exception):
    """A user-defined exception, as a grader of a third-party env would raise."""


ERRORS: list[type[Exception]] = [
    RuntimeError,
    ValueError,
    KeyError,
    TypeError,
    ZeroDivisionError,
    AssertionError,
    ConnectionResetError,
    TimeoutError,
    OSError,
    RecursionError,
    GraderCrashed,
    ToolError,
    EnvCheckError,
    TrajectoryError,  # the engine's own error type, raised by an env: still the env's
]


@functools.cache
def tokenizer() -> Any:
    return build_chat_tokenizer("chatml")


def guess(prompt_ids: list[int]) -> Generation:
    """A policy that depends only on the prompt: an episode plays the same in any batch."""
    tok = tokenizer()
    number = zlib.crc32(bytes(str(prompt_ids), "ascii")) % 16 + 1
    return Generation(token_ids=[*tok.encode(f"I guess {number}", add_special_tokens=False), tok.eos_token_id])


def generate_batch(requests: list[TurnRequest]) -> list[Generation]:
    return [guess(list(r.prompt_ids or [])) for r in requests]


async def generate_one(request: TurnRequest) -> Generation:
    await asyncio.sleep(0)  # let the other episodes interleave
    return guess(list(request.prompt_ids or []))


def env_for(seed: int, failure: tuple[int, type[BaseException]] | None) -> Env:
    env: Env = NumberGuessEnv(max_turns=MAX_TURNS)
    if failure is not None:
        env = FaultyEnv(env, fail_at=failure[0], error=failure[1])
    return env


def job(seed: int, failure: tuple[int, type[BaseException]] | None) -> EpisodeJob:
    return EpisodeJob(env=env_for(seed, failure), env_id=ENV_ID, seed=seed, episode_id=f"episode-{seed}")


def play_concurrently(engine: EpisodeEngine, jobs: list[EpisodeJob]) -> list[Any]:
    async def main() -> list[Any]:
        plays = [
            engine.play(j.env, generate_one, env_id=j.env_id, seed=j.seed, episode_id=j.episode_id, index=i)
            for i, j in enumerate(jobs)
        ]
        return list(await asyncio.gather(*plays))

    return asyncio.run(main())


DRIVERS = {
    "play_batch": lambda engine, jobs: engine.play_batch(jobs, generate_batch),
    "play": play_concurrently,
}


def record(session: Any) -> tuple[Any, ...]:
    """What a trainer reads of an episode (timings and batch position left out)."""
    return (session.episode_id, session.start_state_id, session.end_reason, session.turns, session.context)


failures = st.integers(1, 6).flatmap(
    lambda size: st.dictionaries(
        st.integers(0, size - 1),
        st.tuples(st.integers(0, MAX_TURNS), st.sampled_from(ERRORS)),
        max_size=size,
    ).map(lambda failing: (size, failing))
)


@pytest.mark.parametrize("driver", list(DRIVERS), ids=list(DRIVERS))
@settings(max_examples=40, deadline=None)
@given(batch=failures)
def test_a_failing_env_ends_only_its_own_episode(driver: str, batch: tuple[int, dict[int, Any]]) -> None:
    size, failing = batch
    engine = EpisodeEngine(tokenizer(), max_turns=MAX_TURNS, max_turn_tokens=16, on_env_error="end")
    play = DRIVERS[driver]
    sessions = play(engine, [job(seed, failing.get(seed)) for seed in range(size)])
    reference = play(engine, [job(seed, None) for seed in range(size)])  # the same batch, nothing fails
    survivors = [seed for seed in range(size) if seed not in failing]
    alone = play(engine, [job(seed, None) for seed in survivors])  # a batch without the failing ones

    assert [record(sessions[seed]) for seed in survivors] == [record(s) for s in alone]
    for seed, (fail_at, error) in failing.items():
        session, clean = sessions[seed], reference[seed]
        if fail_at > len(clean.turns):  # the episode ended before its failing step
            assert record(session) == record(clean)
            continue
        assert session.end_reason == "error" and session.done
        assert session.turns == clean.turns[: max(fail_at - 1, 0)]
        meta = session.episode().metadata
        assert meta["end_reason"] == "error"
        assert meta["error_phase"] == ("reset" if fail_at == 0 else "step")
        assert meta["error_type"] == error.__name__
        assert f"seed={seed}" in meta["error_message"] and meta["error"].startswith(error.__name__)
        assert "FaultyEnv" in meta["error_traceback"] and len(meta["error_traceback"]) <= 2000
        assert isinstance(session.error, error)
        # The turn whose step raised is dropped: the context is back at that turn's prompt.
        expected_context = None if fail_at == 0 else clean.turns[fail_at - 1].prompt_token_ids
        assert session.context == expected_context
        assert len(session.generations) == len(session.turns) == len(session.policy_seconds)


@pytest.mark.parametrize("driver", list(DRIVERS), ids=list(DRIVERS))
def test_raise_is_the_default_and_names_the_episode(driver: str) -> None:
    engine = EpisodeEngine(tokenizer(), max_turns=MAX_TURNS)
    assert engine.limits.on_env_error == "raise"
    with pytest.raises(GraderCrashed, match="injected failure in step 1") as info:
        DRIVERS[driver](engine, [job(0, None), job(1, (1, GraderCrashed))])
    assert any("episode-1" in note for note in info.value.__notes__)


def test_generate_errors_raise_under_end() -> None:
    engine = EpisodeEngine(tokenizer(), max_turns=MAX_TURNS, on_env_error="end")

    def broken_batch(requests: list[TurnRequest]) -> list[Generation]:
        raise ConnectionError("inference server down")

    async def broken_one(request: TurnRequest) -> Generation:
        raise ConnectionError("inference server down")

    with pytest.raises(ConnectionError, match="inference server down"):
        engine.play_batch([job(0, None)], broken_batch)
    with pytest.raises(ConnectionError, match="inference server down"):
        asyncio.run(engine.play(NumberGuessEnv(), broken_one, env_id=ENV_ID, seed=0))
    # A generation the engine cannot take (no ids in token mode) is the trainer's side too.
    with pytest.raises(TrajectoryError, match="no token_ids"):
        engine.play_batch([job(0, None)], lambda requests: [Generation(text="7") for _ in requests])


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit], ids=["keyboard-interrupt", "system-exit"])
def test_base_exceptions_are_never_swallowed(error: type[BaseException]) -> None:
    engine = EpisodeEngine(tokenizer(), max_turns=MAX_TURNS, on_env_error="end")
    for fail_at in (0, 2):
        with pytest.raises(error):
            engine.play_batch([job(0, None), job(1, (fail_at, error))], generate_batch)


def test_cancellation_is_never_swallowed() -> None:
    engine = EpisodeEngine(tokenizer(), max_turns=MAX_TURNS, on_env_error="end")

    async def main() -> None:
        env = GenericTestEnv(step_func=lambda env, action: (_ for _ in ()).throw(asyncio.CancelledError()))
        await engine.play(env, generate_one, env_id=ENV_ID, seed=0)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())


def test_the_runner_collects_a_failed_episode_and_replaces_its_env() -> None:
    from gem_core.runner import run_episodes

    built: list[FaultyEnv] = []

    def factory() -> Env:
        env = FaultyEnv(NumberGuessEnv(max_turns=MAX_TURNS), fail_at=2, seeds=[0], error=GraderCrashed)
        built.append(env)
        return env

    async def policy(messages: list[Any]) -> str:
        return "1"

    episodes = asyncio.run(
        run_episodes(factory, 3, policy=policy, start_seeds=[0, 1, 2], max_in_flight=1, on_env_error="end")
    )
    by_seed = {e.seed: e for e in episodes}
    assert by_seed[0].metadata["end_reason"] == "error" and by_seed[0].num_turns == 1
    assert {by_seed[s].metadata["end_reason"] for s in (1, 2)} == {"env"}
    assert len(built) == 2  # the env that raised was closed and replaced


def test_on_env_error_is_checked() -> None:
    with pytest.raises(ConfigError, match="on_env_error must be one of"):
        EpisodeEngine(None, on_env_error="ignore")


def test_the_batch_report_names_failed_episodes_only() -> None:
    engine = EpisodeEngine(tokenizer(), max_turns=MAX_TURNS, on_env_error="end")
    jobs = [job(seed, (0, GraderCrashed) if seed % 2 else None) for seed in range(14)]
    episodes = [s.episode() for s in engine.play_batch(jobs, generate_batch)]
    assert [failed_by_env(e) for e in episodes] == [bool(seed % 2) for seed in range(14)]
    report = env_error_report(episodes, shown=2)
    assert report is not None and report.startswith("7 of 14 episodes ended by an env error")
    assert f"{ENV_ID} seed=1 in reset: GraderCrashed: FaultyEnv: injected failure in reset (seed=1)" in report
    assert "seed=5" not in report and report.endswith("; and 5 more")
    assert env_error_report(episodes[:1]) is None
    assert env_error_report([e.metadata | {"env_id": e.env_id, "seed": e.seed} for e in episodes[1:2]], total=9)
    assert "1 of 9 episodes" in str(env_error_report([episodes[1]], total=9))


def test_a_generate_error_is_not_an_env_error() -> None:
    engine = EpisodeEngine(tokenizer(), max_turns=MAX_TURNS, on_env_error="end")
    session = engine.session(env_id=ENV_ID, seed=0)

    async def broken(request: TurnRequest) -> Generation:
        raise ConnectionError("inference server down")

    with pytest.raises(ConnectionError):
        asyncio.run(engine.play(NumberGuessEnv(), broken, seed=0, session=session))
    assert session.end_reason == "error" and session.metadata["error_phase"] == "generate"
    assert not failed_by_env(session.episode())
