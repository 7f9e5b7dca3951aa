from __future__ import annotations

import types

import pytest

from gem_core.core import StepReturn
from gem_core.errors import ConfigError, ResetNeeded
from gem_core.testing import GenericTestEnv
from gem_core.wrappers import EpisodeStatistics, TimeLimit


def tool_step(env: GenericTestEnv, action: str) -> StepReturn:
    done = env.t >= 3
    info = {"tool_calls": 2 if action == "tool" else 0}
    if done:
        info["success"] = True
    return f"o{env.t}", 0.5, done, False, info


def test_episode_statistics_in_final_info_only() -> None:
    env = EpisodeStatistics(GenericTestEnv(step_func=tool_step))
    env.reset(seed=0)
    infos = [env.step(a)[4] for a in ("tool", "x", "tool")]
    assert "episode" not in infos[0] and "episode" not in infos[1]
    stats = infos[2]["episode"]
    assert stats["return"] == 1.5 and stats["length"] == 3 and stats["tool_calls"] == 4 and stats["success"] is True
    assert stats["elapsed_s"] >= 0
    env.reset()
    assert env.episode_return == 0.0 and env.episode_length == 0 and env.episode_tool_calls == 0


def test_success_defaults_to_false_and_truncation_counts() -> None:
    env = EpisodeStatistics(TimeLimit(GenericTestEnv(episode_length=10), max_turns=2))
    env.reset(seed=0)
    env.step("a")
    *_, truncated, info = env.step("b")
    assert truncated and info["episode"]["success"] is False and info["episode"]["length"] == 2


def test_max_turns_truncates_but_never_overrides_termination() -> None:
    env = TimeLimit(GenericTestEnv(episode_length=3), max_turns=3)
    env.reset(seed=0)
    assert env.step("a")[2:4] == (False, False)
    env.step("b")
    _, _, terminated, truncated, _ = env.step("c")
    assert terminated and not truncated  # ended by the task on the limit step: terminal, not cut
    short = TimeLimit(GenericTestEnv(episode_length=9), max_turns=2)
    short.reset(seed=0)
    short.step("a")
    assert short.step("b")[2:4] == (False, True)
    short.reset()
    assert short.turns == 0 and short.step("a")[3] is False


def test_max_seconds_truncates_slow_episodes(monkeypatch: pytest.MonkeyPatch) -> None:
    # the wrapper's clock, driven by the test: each step "takes" 0.03 s whatever the machine's load
    import gem_core.wrappers.limits as limits

    now = [1000.0]
    monkeypatch.setattr(limits, "time", types.SimpleNamespace(monotonic=lambda: now[0]))

    def slow(env: GenericTestEnv, action: str) -> StepReturn:
        now[0] += 0.03
        return "o", 0.0, False, False, {}

    env = TimeLimit(GenericTestEnv(step_func=slow), max_seconds=0.05)
    env.reset(seed=0)
    flags = [env.step("a")[3] for _ in range(2)]
    assert flags == [False, True]  # 0.03 s in: on time; 0.06 s in: past max_seconds
    with pytest.raises(ResetNeeded, match="after the episode ended"):
        env.step("a")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs max_turns or max_seconds"),
        ({"max_turns": 0}, "max_turns must be >= 1"),
        ({"max_seconds": -1}, "> 0"),
    ],
    ids=["none", "zero-turns", "negative-seconds"],
)
def test_time_limit_config_errors(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TimeLimit(GenericTestEnv(), **kwargs)  # type: ignore[arg-type]
