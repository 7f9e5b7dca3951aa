from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import numpy as np
import pytest

from gem_core.core import AsyncEnv, Env, ResetReturn, StepReturn, make_rngs, to_async, to_sync
from gem_core.testing import GenericTestEnv, NumberGuessEnv


class _Minimal(Env):
    """Draws nothing itself: what a test draws from its RNGs is all that is drawn."""

    def step(self, action: str) -> StepReturn:
        return action, 0.0, True, False, {}


class SleepyAsyncEnv(AsyncEnv):
    """Async env that awaits between steps, like an env waiting on a server."""

    def __init__(self) -> None:
        self.closed = 0
        self.t = 0

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        await super().reset(seed=seed)
        self.t = 0
        return f"start {int(self.np_random.integers(1000))}", {}

    async def step(self, action: str) -> StepReturn:
        await asyncio.sleep(0)
        self.t += 1
        return f"got {action}", 0.5, self.t >= 2, False, {}

    async def close(self) -> None:
        self.closed += 1


def test_same_seed_same_episode() -> None:
    a, b = NumberGuessEnv(), NumberGuessEnv()
    assert a.reset(seed=7) == b.reset(seed=7)
    assert [a.step(str(g)) for g in range(1, 5)] == [b.step(str(g)) for g in range(1, 5)]
    assert a.target == b.target


def test_reset_without_seed_continues_the_stream() -> None:
    env = GenericTestEnv()
    first = env.reset(seed=3)[0]
    second = env.reset()[0]
    env.reset(seed=3)
    assert env.reset()[0] == second
    assert first != second


def test_global_rng_untouched() -> None:
    random.seed(123)
    np.random.seed(123)
    expected_py, expected_np = random.random(), np.random.random()
    random.seed(123)
    np.random.seed(123)
    env = NumberGuessEnv()
    for seed in range(5):
        env.reset(seed=seed)
        env.step(env.sample_random_action())
    assert random.random() == expected_py
    assert np.random.random() == expected_np


def test_make_rngs_derives_both_from_one_seed() -> None:
    np_a, py_a, used = make_rngs(42)
    np_b, py_b, _ = make_rngs(42)
    assert used == 42
    assert np_a.integers(1 << 30) == np_b.integers(1 << 30)
    assert py_a.random() == py_b.random()
    assert make_rngs(None)[2] != make_rngs(None)[2]


@pytest.mark.parametrize("seed", [-1, 1.5, "3"], ids=["negative", "float", "string"])
def test_bad_seed_is_rejected(seed: Any) -> None:
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        NumberGuessEnv().reset(seed=seed)


def test_reset_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        NumberGuessEnv().reset(3)  # type: ignore[misc]


def test_context_manager_closes() -> None:
    env = GenericTestEnv()
    with env:
        env.reset(seed=0)
    assert env.closed == 1


def test_async_env_driven_from_plain_code() -> None:
    inner = SleepyAsyncEnv()
    env = to_sync(inner)
    assert isinstance(env, Env)
    obs, _ = env.reset(seed=1)
    assert obs.startswith("start")
    assert env.step("a") == ("got a", 0.5, False, False, {})
    assert env.step("b")[2] is True
    threads_before = threading.active_count()
    env.close()
    env.close()
    assert inner.closed == 1
    assert threading.active_count() == threads_before - 1


def test_async_env_bridged_inside_a_running_loop() -> None:
    async def main() -> str:
        env = to_sync(SleepyAsyncEnv())  # asyncio.run would fail here; the bridge has its own loop
        try:
            return env.reset(seed=0)[0]
        finally:
            env.close()

    assert asyncio.run(main()).startswith("start")


@pytest.mark.parametrize("in_thread", [True, False], ids=["thread", "inline"])
def test_sync_env_driven_from_asyncio(in_thread: bool) -> None:
    sync_env = NumberGuessEnv()
    env = to_async(sync_env, in_thread=in_thread)

    async def main() -> list[StepReturn]:
        await env.reset(seed=5)
        return [await env.step(str(g)) for g in (1, 2)]

    assert asyncio.run(main()) == _steps(5, ["1", "2"])


def _steps(seed: int, actions: list[str]) -> list[StepReturn]:
    env = NumberGuessEnv()
    env.reset(seed=seed)
    return [env.step(a) for a in actions]


def test_bridges_round_trip_to_the_same_object() -> None:
    sync_env = NumberGuessEnv()
    assert to_sync(to_async(sync_env)) is sync_env
    async_env = SleepyAsyncEnv()
    assert to_async(to_sync(async_env)) is async_env
    assert to_sync(sync_env) is sync_env
    assert to_async(async_env) is async_env


def test_number_guess_rewards_and_flags() -> None:
    env = NumberGuessEnv(low=1, high=4, max_turns=2)
    env.reset(seed=0)
    target = env.target
    assert target is not None
    _, reward, terminated, truncated, info = env.step("no number here")
    assert (reward, terminated, truncated, info) == (-0.1, False, False, {"format_error": True})
    _, reward, terminated, truncated, info = env.step(f"I think \\boxed{{{target}}}")
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)


def test_number_guess_truncates_at_turn_limit() -> None:
    env = NumberGuessEnv(low=1, high=100, max_turns=1)
    env.reset(seed=0)
    wrong = 1 if env.target != 1 else 2
    _, reward, terminated, truncated, _ = env.step(str(wrong))
    assert (reward, terminated, truncated) == (0.0, False, True)


def test_step_before_reset_raises_reset_needed() -> None:
    from gem_core.errors import ResetNeeded

    with pytest.raises(ResetNeeded):
        NumberGuessEnv().step("1")


@pytest.mark.parametrize("order", ["np-first", "py-first", "np-only", "py-only"])
@pytest.mark.parametrize("seed", [0, 7, 2**63 + 5], ids=["seed-0", "seed-7", "seed-2**63+5"])
def test_rngs_built_on_first_use_are_make_rngs_streams(order: str, seed: int) -> None:
    """A reset only records the seed; whichever RNG is drawn first, each gives make_rngs' stream."""
    np_ref, py_ref, used = make_rngs(seed)
    expected = {"np": np_ref.integers(0, 2**32, 8).tolist(), "py": [py_ref.random() for _ in range(8)]}
    env = _Minimal()
    env.reset(seed=seed)
    assert env.seed_used == used == seed
    names = {"np-first": ["np", "py"], "py-first": ["py", "np"], "np-only": ["np"], "py-only": ["py"]}[order]
    for name in names:
        got = (
            env.np_random.integers(0, 2**32, 8).tolist() if name == "np" else [env.py_random.random() for _ in range(8)]
        )
        assert got == expected[name]
    env.reset()  # no seed: both streams go on where they were
    if "np" in names:
        assert env.np_random.integers(0, 2**32, 8).tolist() == np_ref.integers(0, 2**32, 8).tolist()
    if "py" in names:
        assert [env.py_random.random() for _ in range(8)] == [py_ref.random() for _ in range(8)]


def test_unseeded_env_draws_entropy_once_and_reproduces_from_seed_used() -> None:
    env = _Minimal()
    env.reset()
    first = env.np_random.integers(0, 2**32, 4).tolist()
    used = env.seed_used
    assert used is not None
    env.reset()
    assert env.seed_used == used  # continued, not redrawn
    again = _Minimal()
    again.reset(seed=used)
    assert again.np_random.integers(0, 2**32, 4).tolist() == first
