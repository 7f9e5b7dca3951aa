from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gem_core import make
from gem_core.core import AsyncEnv, ResetReturn, StepReturn, to_async
from gem_core.errors import WrapperNotFound
from gem_core.testing import GenericTestEnv, NumberGuessEnv, check_env
from gem_core.wrappers import (
    ActionWrapper,
    AsyncEpisodeStatistics,
    EpisodeStatistics,
    ObservationWrapper,
    RewardWrapper,
    TimeLimit,
    Wrapper,
    chat_history,
    episode_statistics,
)


class Shout(ObservationWrapper):
    def observation(self, obs: str) -> str:
        return obs.upper()


class Prefix(ActionWrapper):
    def action(self, action: str) -> str:
        return "say " + action


class Double(RewardWrapper):
    def reward(self, reward: float) -> float:
        return 2 * reward


def test_wrapper_reads_inner_state_live_not_a_snapshot() -> None:
    inner = GenericTestEnv(episode_length=5)
    env = TimeLimit(EpisodeStatistics(inner), max_turns=9)
    env.reset(seed=0)
    assert env.get_wrapper_attr("t") == 0
    env.step("a")
    env.step("b")
    assert env.get_wrapper_attr("t") == 2  # a snapshot taken at construction would still say 0
    # the outermost layer that has a name wins: EpisodeStatistics counts its own episode_length
    assert env.get_wrapper_attr("episode_length") == 2 and inner.episode_length == 5
    assert env.get_wrapper_attr("max_turns") == 9
    assert env.np_random is inner.np_random and env.py_random is inner.py_random
    assert env.unwrapped is inner
    env.set_wrapper_attr("t", 7)
    assert inner.t == 7


def test_missing_attribute_names_every_layer() -> None:
    env = Shout(GenericTestEnv())
    with pytest.raises(AttributeError, match=r"no layer of Shout -> GenericTestEnv has an attribute 'nope'"):
        env.get_wrapper_attr("nope")


def test_spec_is_forwarded() -> None:
    env = make("core:NumberGuess-v0", wrappers=["episode_stats"])
    assert isinstance(env, EpisodeStatistics)
    assert env.spec is not None and env.spec.id == "core:NumberGuess-v0"
    assert env.spec is env.unwrapped.spec


def test_one_override_point_each() -> None:
    env = Double(Prefix(Shout(GenericTestEnv(episode_length=1))))
    obs, _ = env.reset(seed=1)
    assert obs.startswith("START ")
    obs, reward, terminated, _, _ = env.step("hi")
    assert obs == "ECHO[1]: SAY HI" and reward == 2.0 and terminated


def test_close_is_forwarded() -> None:
    inner = GenericTestEnv()
    env = Shout(inner)
    env.close()
    env.close()
    assert inner.closed == 2


def test_wrapper_rejects_non_envs() -> None:
    with pytest.raises(TypeError, match=r"wraps a gem_core\.Env, got str"):
        Wrapper("not an env")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="for an AsyncEnv use the async variant"):
        EpisodeStatistics(to_async(GenericTestEnv()))  # type: ignore[arg-type]


def test_wrapped_env_keeps_the_env_contract() -> None:
    def factory() -> Any:
        return make("core:NumberGuess-v0", wrappers=["chat", "episode_stats", ("max_turns", {"max_turns": 3})])

    check_env(factory(), env_factory=factory)


def test_registered_names_pick_the_async_variant() -> None:
    class AsyncEcho(AsyncEnv):
        async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
            await super().reset(seed=seed)
            return "go", {}

        async def step(self, action: str) -> StepReturn:
            return f"got {action}", 1.0, True, False, {}

    env = episode_statistics(chat_history(AsyncEcho(), mode="observation_action"))
    assert isinstance(env, AsyncEpisodeStatistics)

    async def run() -> StepReturn:
        await env.reset(seed=0)
        return await env.step("x")

    obs, _, _, _, info = asyncio.run(run())
    assert obs == "go\nx\ngot x"
    assert info["episode"]["return"] == 1.0 and info["messages"][-1] == {"role": "user", "content": "got x"}


def test_unknown_wrapper_name() -> None:
    with pytest.raises(WrapperNotFound, match="chat, episode_stats, max_turns, time_limit"):
        make("core:NumberGuess-v0", wrappers=["nope"])


def test_plugins_can_register_wrappers() -> None:
    from gem_core.hookspecs import hookimpl
    from gem_core.plugins import PluginSettings, build_registry
    from gem_core.registry import WrapperSpec

    class Plugin:
        @hookimpl
        def register_wrappers(self) -> list[WrapperSpec]:
            return [WrapperSpec(name="shout", entry_point=Shout)]

    registry, _ = build_registry(PluginSettings(autoload=False), extra_plugins=[("shouter", Plugin())])
    env = registry.make("core:NumberGuess-v0", wrappers=["shout", "episode_stats"])
    assert isinstance(env, EpisodeStatistics) and isinstance(env.env, Shout)
    obs, _ = env.reset(seed=0)
    assert obs == obs.upper()
    assert isinstance(env.unwrapped, NumberGuessEnv)


def test_spec_wrappers_are_applied_by_name() -> None:
    from gem_core.plugins import get_registry
    from gem_core.registry import EnvSpec, Registry

    registry = Registry()
    for spec in get_registry().wrappers.values():
        registry.add(spec)
    registry.add(
        EnvSpec(
            id="test:Guess-v0",
            entry_point="gem_core.testing:NumberGuessEnv",
            wrappers=("chat", ("max_turns", {"max_turns": 1})),
        )
    )
    env = registry.make("test:Guess-v0", wrappers=["episode_stats"])
    assert isinstance(env, EpisodeStatistics) and isinstance(env.env, TimeLimit)
    env.reset(seed=0)
    *_, truncated, info = env.step("no number")
    assert truncated and info["episode"]["length"] == 1 and len(info["messages"]) == 3
