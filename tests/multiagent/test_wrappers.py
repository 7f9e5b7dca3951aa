"""Per-agent wrappers: chat history, episode statistics, turn limits."""

from __future__ import annotations

import pytest

from gem_core.errors import ConfigError, ResetNeeded
from gem_core.multiagent import (
    MultiAgentChatHistory,
    MultiAgentEpisodeStatistics,
    MultiAgentTimeLimit,
    check_multiagent_env,
)
from gem_core.multiagent.reference import NimEnv, RockPaperScissorsEnv


def _play(env: NimEnv | MultiAgentChatHistory, moves: list[str]) -> None:
    for move in moves:
        env.step(move)


def test_chat_history_alternates_and_joins_news_per_agent() -> None:
    env = MultiAgentChatHistory(NimEnv(low=9, high=9), system_prompts={"second": "You are careful."})
    env.reset(seed=0)
    _play(env, ["1", "2", "3"])
    first, second = env.messages["first"], env.messages["second"]
    assert [m["role"] for m in first] == ["user", "assistant", "user", "assistant", "user"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    # the second player's first prompt is its briefing and the first move, in one message
    assert "You move second" in second[1]["content"] and "first took 1; 8 left" in second[1]["content"]
    assert [m["content"] for m in first if m["role"] == "assistant"] == ["1", "3"]


def test_chat_history_refuses_unknown_agents() -> None:
    with pytest.raises(ConfigError, match="ghost"):
        MultiAgentChatHistory(NimEnv(), system_prompts={"ghost": "hi"})


def test_episode_statistics_count_rewards_earned_on_the_others_turns() -> None:
    env = MultiAgentEpisodeStatistics(NimEnv(low=5, high=5))
    env.reset(seed=0)
    env.step("1")  # 4 left
    _, rewards, _, _, infos = env.step("x")  # second forfeits on its own move
    assert rewards == {"first": 1.0, "second": -1.0}
    assert infos["first"]["episode"]["return"] == 1.0 and infos["first"]["episode"]["length"] == 1
    assert infos["second"]["episode"]["outcome"] == "loss" and infos["second"]["episode"]["length"] == 1


@pytest.mark.parametrize("scope", ["all", "agent"], ids=str)
def test_time_limit_counts_each_agents_turns(scope: str) -> None:
    env = MultiAgentTimeLimit(RockPaperScissorsEnv(rounds=10), max_turns=2, scope=scope)
    env.reset(seed=0)
    _, _, _, truncs, _ = env.step({"player_0": "rock", "player_1": "rock"})
    assert not any(truncs.values())
    _, _, terms, truncs, _ = env.step({"player_0": "rock", "player_1": "paper"})
    assert all(truncs.values()) and not any(terms.values()) and env.episode_over
    with pytest.raises(ResetNeeded):
        env.step({"player_0": "rock", "player_1": "rock"})


def test_time_limit_truncates_everyone_in_a_turn_based_game() -> None:
    env = MultiAgentTimeLimit(NimEnv(low=12, high=12), max_turns=2)
    env.reset(seed=0)
    _play(env, ["1", "1"])
    assert not env.episode_over
    _, _, terms, truncs, _ = env.step("1")  # first's 2nd turn: everyone is cut
    assert truncs == {"first": True, "second": True} and not any(terms.values())


def test_a_terminal_step_stays_terminal_under_the_limit() -> None:
    env = MultiAgentTimeLimit(NimEnv(low=1, high=1), max_turns=1)
    env.reset(seed=0)
    _, _, terms, truncs, _ = env.step("1")
    assert all(terms.values()) and not any(truncs.values())


@pytest.mark.parametrize("kwargs", [{}, {"max_turns": 0}, {"max_seconds": -1.0}, {"max_turns": 1, "scope": "x"}])
def test_time_limit_config_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        MultiAgentTimeLimit(NimEnv(), **kwargs)  # type: ignore[arg-type]


def test_wrapped_envs_keep_the_contract_and_read_the_inner_env_live() -> None:
    def build(inner: NimEnv) -> MultiAgentChatHistory:
        return MultiAgentChatHistory(MultiAgentEpisodeStatistics(MultiAgentTimeLimit(inner, max_turns=3)))

    inner = NimEnv()
    env = build(inner)
    check_multiagent_env(env, env_factory=lambda: build(NimEnv()))
    env.reset(seed=5)
    assert env.np_random is inner.np_random and env.unwrapped is inner
    env.step("1")
    assert env.agent_selection == inner.agent_selection == "second"
