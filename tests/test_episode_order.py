"""The core keeps the episode order for every env ``make`` builds: authors write no ``ResetNeeded`` bookkeeping.

The property (hypothesis, over random schedules of ``reset`` and ``step`` calls): an env built by
``gem_core.make`` raises :class:`ResetNeeded` exactly when no episode is running (before the first
``reset``, after a step that returned ``terminated`` or ``truncated``), without reaching the env's
code; everywhere else it returns what the env itself returns. The env stays the env's own object.
"""

from __future__ import annotations

import asyncio
import functools
import io
import pickle
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gem_core
from gem_core.cli import main
from gem_core.core import AsyncEnv, Env, ResetReturn, StepReturn, enforce_episode_order, to_sync
from gem_core.errors import EnvCheckError, ResetNeeded
from gem_core.testing import NumberGuessEnv, check_env
from gem_core.wrappers import EpisodeStatistics, TimeLimit


class Bare(Env):
    """A game with no bookkeeping at all: ends after ``length`` steps, and answers any step after that."""

    def __init__(self, length: int = 2, truncate: bool = False) -> None:
        self.length, self.truncate = length, truncate
        self.t = 0
        self.steps_seen = 0  # every call that reached the env's own step

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        self.t = 0
        return f"start {self.np_random.integers(100)}", {}

    def step(self, action: str) -> StepReturn:
        self.steps_seen += 1
        self.t += 1
        done = self.t >= self.length
        return f"{action} {self.t}", float(self.t), done and not self.truncate, done and self.truncate, {}

    def sample_random_action(self) -> str:
        return "a"


class BareAsync(AsyncEnv):
    """:class:`Bare` as an async env."""

    def __init__(self, length: int = 2) -> None:
        self.length, self.t, self.steps_seen = length, 0, 0

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        await super().reset(seed=seed)
        self.t = 0
        return "start", {}

    async def step(self, action: str) -> StepReturn:
        await asyncio.sleep(0)
        self.steps_seen += 1
        self.t += 1
        return f"{action} {self.t}", 1.0, self.t >= self.length, False, {}

    def sample_random_action(self) -> str:
        return "a"


class ResetMixin:
    """A ``reset`` that a game class gets from a mixin, not from its own body."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        Env.reset(self, seed=seed)  # type: ignore[arg-type]
        self.t = 0
        return "mixed", {}


class FromMixin(ResetMixin, Env):
    def __init__(self) -> None:
        self.t = 0

    def step(self, action: str) -> StepReturn:
        self.t += 1
        return "o", 0.0, self.t >= 2, False, {}


class OpensWithAMove(Bare):
    """Its ``reset`` plays the opponent's first move through its own ``step`` (one reset, not a step outside)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        obs, *_ = self.step("opening")
        return obs, {}


class Refines(Bare):
    """A subclass whose ``step`` calls ``super().step()``: one call, checked once."""

    def step(self, action: str) -> StepReturn:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs.upper(), reward, terminated, truncated, info


class OwnBookkeeping(Bare):
    """Raises ResetNeeded itself, as gem's envs did before the core did it: keeps working."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        self.running = True
        return super().reset(seed=seed)

    def step(self, action: str) -> StepReturn:
        if not getattr(self, "running", False):
            raise ResetNeeded("OwnBookkeeping: reset first")
        result = super().step(action)
        self.running = not (result[2] or result[3])
        return result


IDS = {
    "order:Bare-v0": Bare,
    "order:Truncates-v0": functools.partial(Bare, truncate=True),
    "order:Mixin-v0": FromMixin,
    "order:Opens-v0": OpensWithAMove,
    "order:Refines-v0": Refines,
    "order:Own-v0": OwnBookkeeping,
}


@pytest.fixture(autouse=True)
def _registered() -> Iterator[None]:
    for env_id, factory in IDS.items():
        gem_core.register(env_id, factory, override=True)
    gem_core.register("order:Async-v0", BareAsync, override=True)
    gem_core.register("order:Wrapped-v0", Bare, wrappers=("episode_stats",), override=True)
    yield


Call = tuple[str, str]  # ("reset", "") or ("step", action)
CALLS = st.lists(
    st.one_of(st.just(("reset", "")), st.tuples(st.just("step"), st.sampled_from(["a", "", "\\boxed{1}"]))),
    max_size=12,
)


def _play(env: Any, twin: Any, calls: list[Call]) -> None:
    """Drive ``env`` (built by make) and ``twin`` (the same class, built directly) through ``calls``."""
    running = False
    for kind, action in calls:
        if kind == "reset":
            assert env.reset(seed=1) == twin.reset(seed=1)
            running = True
            continue
        if not running:
            seen = env.steps_seen
            with pytest.raises(ResetNeeded, match=r"call reset\(\)"):
                env.step(action)
            assert env.steps_seen == seen  # refused before the env's own code ran
            continue
        result = env.step(action)
        assert result == twin.step(action)
        running = not (result[2] or result[3])


@pytest.mark.parametrize("env_id", ["order:Bare-v0", "order:Truncates-v0"])
@settings(max_examples=60, deadline=None)
@given(calls=CALLS, length=st.integers(1, 3))
def test_made_env_refuses_exactly_the_steps_outside_an_episode(env_id: str, calls: list[Call], length: int) -> None:
    env = gem_core.make(env_id, length=length)
    twin = Bare(length=length, truncate=env_id == "order:Truncates-v0")
    _play(env, twin, calls)


@settings(max_examples=40, deadline=None)
@given(calls=CALLS, length=st.integers(1, 3))
def test_made_async_env_refuses_exactly_the_steps_outside_an_episode(calls: list[Call], length: int) -> None:
    env, twin = to_sync(gem_core.make("order:Async-v0", length=length)), to_sync(BareAsync(length=length))
    try:
        running = False
        for kind, action in calls:
            if kind == "reset":
                assert env.reset(seed=1) == twin.reset(seed=1)
                running = True
            elif not running:
                with pytest.raises(ResetNeeded):
                    env.step(action)
            else:
                result = env.step(action)
                assert result == twin.step(action)
                running = not (result[2] or result[3])
    finally:
        env.close()
        twin.close()


def test_the_made_env_is_the_envs_own_object() -> None:
    env = gem_core.make("order:Bare-v0", length=3)
    assert type(env) is Bare and env.length == 3  # no wrapper: attributes and isinstance checks as before
    assert type(gem_core.make("order:Wrapped-v0")) is EpisodeStatistics  # the spec's wrappers, and no other
    assert type(gem_core.make("order:Wrapped-v0").env) is Bare


def test_a_directly_built_env_is_left_as_its_author_wrote_it() -> None:
    env = Bare(length=1)
    assert env.step("x")[2]  # no reset: the env's own answer
    assert enforce_episode_order(env) is env
    with pytest.raises(ResetNeeded):
        env.step("x")


@pytest.mark.parametrize(
    ("env_id", "first_obs"),
    [("order:Mixin-v0", "mixed"), ("order:Opens-v0", "opening 1"), ("order:Refines-v0", "start")],
    ids=["reset-from-a-mixin", "reset-steps-itself", "step-calls-super"],
)
def test_inherited_and_nested_calls_are_one_call(env_id: str, first_obs: str) -> None:
    env = gem_core.make(env_id)
    obs, _ = env.reset(seed=0)
    assert obs.startswith(first_obs)
    while True:
        *_, terminated, truncated, _ = env.step("a")
        if terminated or truncated:
            break
    with pytest.raises(ResetNeeded, match="after the episode ended"):
        env.step("a")
    env.reset(seed=0)
    env.step("a")  # a new episode runs


def test_an_env_with_its_own_bookkeeping_keeps_working() -> None:
    env = gem_core.make("order:Own-v0", length=1)
    with pytest.raises(ResetNeeded):
        env.step("a")
    env.reset(seed=0)
    assert env.step("a")[2]
    with pytest.raises(ResetNeeded):
        env.step("a")
    check_env(env, env_factory=functools.partial(gem_core.make, "order:Own-v0", length=1))


def test_a_reset_that_raises_leaves_no_episode_running() -> None:
    class FailsToReset(Bare):
        def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
            if options and options.get("fail"):
                raise ValueError("no such level")
            return super().reset(seed=seed)

    gem_core.register("order:FailsToReset-v0", FailsToReset, override=True)
    env = gem_core.make("order:FailsToReset-v0", length=5)
    env.reset(seed=0)
    env.step("a")
    with pytest.raises(ValueError, match="no such level"):
        env.reset(options={"fail": True})
    with pytest.raises(ResetNeeded, match="before reset"):
        env.step("a")


def test_wrappers_around_a_made_env_check_their_own_episode() -> None:
    """A turn limit ends the outer episode while the env's own runs on: each layer keeps its own order."""
    env = TimeLimit(gem_core.make("order:Bare-v0", length=10), max_turns=1)
    env.reset(seed=0)
    assert env.step("a")[3]  # truncated by the limit
    with pytest.raises(ResetNeeded):
        env.step("a")
    env.reset(seed=0)
    assert env.step("a")[3]


def test_a_made_env_pickles_with_its_episode() -> None:
    env = gem_core.make("core:NumberGuess-v0")
    with pytest.raises(ResetNeeded):
        pickle.loads(pickle.dumps(env)).step("5")
    env.reset(seed=0)
    copy = pickle.loads(pickle.dumps(env))
    assert copy.step("5") == env.step("5")


def test_check_env_passes_a_made_env_without_bookkeeping_and_fails_it_built_directly() -> None:
    check_env(gem_core.make("order:Bare-v0"), env_factory=functools.partial(gem_core.make, "order:Bare-v0"))
    with pytest.raises(EnvCheckError, match="instead of raising gem_core.errors.ResetNeeded"):
        check_env(Bare(), env_factory=Bare)


@pytest.mark.parametrize("env_id", [*IDS, "order:Async-v0", "order:Wrapped-v0"])
def test_gem_check_passes_envs_without_bookkeeping(env_id: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main(["check", env_id], stdout=out, stderr=err) == 0, out.getvalue() + err.getvalue()
    assert f"ok    {env_id}" in out.getvalue()


def test_vector_env_members_are_made_with_the_order_kept() -> None:
    from gem_core.vector import SyncVectorEnv

    members = [gem_core.make("order:Bare-v0", length=1) for _ in range(2)]
    vec = SyncVectorEnv([functools.partial(lambda env: env, env) for env in members], autoreset_mode="disabled")
    try:
        vec.reset(seed=0)
        _, _, terminated, _, _ = vec.step(["a", "b"])
        assert list(terminated) == [True, True]
        with pytest.raises(ResetNeeded):
            vec.step(["a", "b"])  # the vector env's own refusal
        with pytest.raises(ResetNeeded):
            members[0].step("a")  # and the member's
        vec.reset(seed=1)
        assert [m.steps_seen for m in members] == [1, 1]
    finally:
        vec.close()


def test_number_guess_made_or_built_refuses_the_same() -> None:
    """gem's own reference env keeps its bookkeeping; made, the core's check answers first, same error type."""
    made, built = gem_core.make("core:NumberGuess-v0"), NumberGuessEnv()
    for env in (made, built):
        with pytest.raises(ResetNeeded):
            env.step("1")
