"""Every wrapper stack and every registered core env refuses ``step`` outside an episode.

The property: before ``reset``, and after any step that returned ``terminated`` or
``truncated`` (the env's own end, a final answer through the tool wrapper, a turn limit),
``step`` raises :class:`ResetNeeded` for every action text (tool calls included), runs no
tool, records nothing; and ``reset`` then starts a fresh episode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gem_core
from gem_core.core import Env, to_async, to_sync
from gem_core.errors import ResetNeeded
from gem_core.multimodal import Content
from gem_core.testing import GenericTestEnv, NumberGuessEnv
from gem_core.tools import Tool, ToolEnvWrapper, ToolResult
from gem_core.wrappers import (
    ActionWrapper,
    AsyncChatHistory,
    AsyncEpisodeStatistics,
    AsyncTimeLimit,
    ChatHistory,
    EpisodeStatistics,
    ObservationWrapper,
    RewardWrapper,
    TimeLimit,
)

TOOL_CALL = '<tool_call>{"name": "count", "arguments": {"text": "x"}}</tool_call>'
TAG_CALL = "<count>y</count>"


class CountTool(Tool):
    """Counts its calls, so a call run after the episode ended is seen."""

    name: ClassVar[str] = "count"
    description: ClassVar[str] = "Counts calls."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"text": {"type": "string"}}}
    tag_argument: ClassVar[str | None] = "text"
    calls = 0

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        CountTool.calls += 1
        return ToolResult(output=f"call {CountTool.calls}")


class Upper(ObservationWrapper):
    def observation(self, obs: str) -> str:
        return obs.upper()


class Strip(ActionWrapper):
    def action(self, action: str) -> str:
        return action.strip()


class Halve(RewardWrapper):
    def reward(self, reward: float) -> float:
        return reward / 2


def _tools(env: Env, with_calls: str) -> Env:
    return ToolEnvWrapper(
        env, [CountTool()], max_tool_calls=3, answer_pattern=r"\\boxed\{", answer_with_calls=with_calls
    )


SYNC_LAYERS: dict[str, Callable[[Any], Any]] = {
    "chat": lambda env: ChatHistory(env, mode="observation_action"),
    "stats": EpisodeStatistics,
    "max_turns": lambda env: TimeLimit(env, max_turns=3),
    "tools-both": lambda env: _tools(env, "both"),
    "tools-env": lambda env: _tools(env, "env"),
    "tools-tools": lambda env: _tools(env, "tools"),
    "observation": Upper,
    "action": Strip,
    "reward": Halve,
}
ASYNC_LAYERS: dict[str, Callable[[Any], Any]] = {
    "chat": lambda env: AsyncChatHistory(env, mode="chat"),
    "stats": AsyncEpisodeStatistics,
    "max_turns": lambda env: AsyncTimeLimit(env, max_turns=2),
}
BASES: dict[str, Callable[[], Env]] = {
    "number-guess": lambda: NumberGuessEnv(high=4, max_turns=4),
    "generic": lambda: GenericTestEnv(episode_length=3),
    "generic-truncating": lambda: GenericTestEnv(step_func=lambda env, a: ("o", 0.0, False, env.t >= 2, {})),
}

actions = st.one_of(
    st.sampled_from(["1", "2", "3", "4", "\\boxed{2}", TOOL_CALL, TAG_CALL, f"{TOOL_CALL} \\boxed{{3}}", ""]),
    st.text(max_size=40),
)


def _build(base: str, sync_layers: list[str], async_layers: list[str]) -> Env:
    env: Any = BASES[base]()
    for name in sync_layers:
        env = SYNC_LAYERS[name](env)
    if async_layers:
        env = to_async(env, in_thread=False)
        for name in async_layers:
            env = ASYNC_LAYERS[name](env)
        env = to_sync(env)
    return env  # type: ignore[no-any-return]


def _refuses(env: Env, action: str) -> None:
    calls = CountTool.calls
    messages = [len(layer.conversation.messages) for layer in _layers(env) if hasattr(layer, "conversation")]
    with pytest.raises(ResetNeeded):
        env.step(action)
    assert CountTool.calls == calls, "a tool ran outside an episode"
    assert messages == [len(layer.conversation.messages) for layer in _layers(env) if hasattr(layer, "conversation")]


def _layers(env: Any) -> list[Any]:
    out = [env]
    while (inner := vars(out[-1]).get("env")) is not None:
        out.append(inner)
    return out


def _play(env: Env, seed: int, moves: list[str]) -> int:
    """Reset, step ``moves`` (then plain guesses) until the episode ends; return the steps taken."""
    obs, info = env.reset(seed=seed)
    assert isinstance(obs, (str, Content)) and isinstance(info, dict)  # core:PictureNumberGuess shows images
    for turn, action in enumerate([*moves, *["1", "2", "3", "4"] * 4], start=1):
        *_, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            return turn
    raise AssertionError("the episode did not end")


@settings(max_examples=80, deadline=None)
@given(
    base=st.sampled_from(sorted(BASES)),
    sync_layers=st.lists(st.sampled_from(sorted(SYNC_LAYERS)), max_size=4),
    async_layers=st.lists(st.sampled_from(sorted(ASYNC_LAYERS)), max_size=2),
    moves=st.lists(actions, max_size=6),
    after=st.lists(actions, min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_step_outside_an_episode_raises_reset_needed(
    base: str, sync_layers: list[str], async_layers: list[str], moves: list[str], after: list[str], seed: int
) -> None:
    env = _build(base, sync_layers, async_layers)
    try:
        for action in after:
            _refuses(env, action)  # before the first reset
        for _ in range(2):  # the second episode proves reset starts afresh
            _play(env, seed, moves)
            for action in after:
                _refuses(env, action)
        env.reset(seed=seed + 1)
        env.step(after[0])  # a normal step again
        for layer in _layers(env):  # counters restarted: a fresh episode
            if isinstance(layer, (TimeLimit, AsyncTimeLimit)):
                assert layer.turns == 1
            if isinstance(layer, (EpisodeStatistics, AsyncEpisodeStatistics)):
                assert layer.episode_length == 1
    finally:
        env.close()


# other packages are held to the same rule by check_env (their own suites); multi-agent envs keep theirs
# (ResetNeeded outside an episode) in tests/multiagent
SINGLE_AGENT_CORE_IDS = [i for i in gem_core.list_envs(namespace="core") if "multi-agent" not in gem_core.spec(i).tags]


@pytest.mark.parametrize("env_id", SINGLE_AGENT_CORE_IDS, ids=str)
@settings(max_examples=15, deadline=None)
@given(moves=st.lists(actions, max_size=10), after=actions)
def test_registered_envs_refuse_step_after_done(env_id: str, moves: list[str], after: str) -> None:
    env = to_sync(gem_core.make(env_id))
    try:
        with pytest.raises(ResetNeeded):
            env.step(after)
        _play(env, 0, moves)
        with pytest.raises(ResetNeeded):
            env.step(after)
        env.reset(seed=1)
        env.step("1")
    finally:
        env.close()
