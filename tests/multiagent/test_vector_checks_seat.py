"""The sync vector env, check_multiagent_env against broken envs, and one seat as a single-agent env."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gem_core.errors import ConfigError, EnvCheckError, ResetNeeded, VectorEnvError
from gem_core.multiagent import (
    MultiAgentEnv,
    MultiResetReturn,
    MultiStepReturn,
    SeatEnv,
    SyncMultiAgentVectorEnv,
    check_multiagent_env,
)
from gem_core.multiagent.reference import NimEnv, RockPaperScissorsEnv
from gem_core.testing import check_env


def test_vector_env_seeds_steps_and_autoresets() -> None:
    vec = SyncMultiAgentVectorEnv([lambda: NimEnv(low=1, high=1), lambda: RockPaperScissorsEnv(rounds=1)])
    first = vec.reset(seed=10)
    assert [set(obs) for obs, _ in first] == [{"first", "second"}, {"player_0", "player_1"}]
    assert vec.acting_agents() == [["first"], ["player_0", "player_1"]]
    results = vec.step(["1", {"player_0": "rock", "player_1": "paper"}])
    assert all(r is not None and all(r[2].values()) for r in results)
    assert vec.acting_agents() == [[], []]
    with pytest.raises(VectorEnvError, match="takes None") as caught:
        vec.step(["1", None])
    assert isinstance(caught.value.failures[0], ResetNeeded)
    assert caught.value.results[1][4]["player_0"]["autoreset"]  # the other sub-env was reset all the same
    again = vec.step([None, None])
    assert again[0] is not None and again[0][4]["first"]["autoreset"] and again[0][1] == {"first": 0.0, "second": 0.0}
    assert again[1] is None  # running: None sits it out
    assert vec.acting_agents() == [["first"], ["player_0", "player_1"]]
    vec.close()


def test_vector_env_is_reproducible() -> None:
    def run() -> list[Any]:
        vec = SyncMultiAgentVectorEnv([NimEnv, NimEnv, NimEnv])
        return [obs for obs, _ in vec.reset(seed=3)]

    assert run() == run()
    with pytest.raises(ConfigError):
        SyncMultiAgentVectorEnv([])
    with pytest.raises(ConfigError):
        SyncMultiAgentVectorEnv([lambda: object()])  # type: ignore[list-item,return-value]


class _GlobalRng(NimEnv):
    def _reset(self, options: dict[str, Any] | None) -> MultiResetReturn:
        out = super()._reset(options)
        self.pile = random.randint(5, 9)
        return out


class _Raises(NimEnv):
    def _turn(self, agent: str, action: str) -> MultiStepReturn:
        if not action.strip().isdigit():
            raise ValueError("cannot parse")
        return super()._turn(agent, action)


class _Endless(RockPaperScissorsEnv):
    def _joint(self, actions: dict[str, str]) -> MultiStepReturn:
        obs, rewards, _, truncs, infos = super()._joint(actions)
        return obs, rewards, {}, truncs, infos


@pytest.mark.parametrize(
    ("env", "message"),
    [(_GlobalRng(), "global `random`"), (_Raises(), "never an error"), (_Endless(), "did not end")],
    ids=["global-rng", "raises-on-text", "never-ends"],
)
def test_check_multiagent_env_catches_broken_envs(env: MultiAgentEnv, message: str) -> None:
    with pytest.raises(EnvCheckError, match=message):
        check_multiagent_env(env)


def test_check_env_dispatches_to_the_multiagent_check() -> None:
    check_env(NimEnv(), env_factory=NimEnv)
    check_env(RockPaperScissorsEnv(), env_factory=RockPaperScissorsEnv)


def _optimal(env: MultiAgentEnv, agent: str, observation: str) -> str:
    nim = env.unwrapped
    assert isinstance(nim, NimEnv)
    return str(nim.optimal_move())


@pytest.mark.parametrize("seat", ["first", "second", None], ids=["first", "second", "random"])
def test_a_seat_is_a_single_agent_env(seat: str | None) -> None:
    env = SeatEnv(NimEnv(), {"first": _optimal, "second": _optimal}, seat=seat)
    check_env(env, env_factory=lambda: SeatEnv(NimEnv(), _optimal, seat=seat))


def test_seat_reward_includes_the_opponents_winning_move() -> None:
    env = SeatEnv(NimEnv(low=4, high=4), _optimal, seat="first")
    obs, info = env.reset(seed=0)
    assert info["seat"] == "first" and "4 stones" in obs
    obs, reward, terminated, truncated, info = env.step("1")  # 3 left: the optimal opponent takes them all
    assert (reward, terminated, truncated) == (-1.0, True, False)
    assert "second took the last stone" in obs and info["outcome"] == "loss"
    with pytest.raises(ResetNeeded):
        env.step("1")


def test_seat_against_a_forfeiting_opponent_reports_it_on_the_first_step() -> None:
    env = SeatEnv(NimEnv(), lambda env, agent, obs: "I refuse", seat="second")
    first_obs, _ = env.reset(seed=0)
    assert "first forfeits" in first_obs  # the seat is told at once; a reset cannot end the episode, the step does
    _, reward, terminated, _, info = env.step("1")
    assert (reward, terminated, info["action_unused"]) == (1.0, True, True)


def test_seat_in_a_simultaneous_game_asks_the_opponent_each_step() -> None:
    seen: list[str] = []

    def rock(env: MultiAgentEnv, agent: str, observation: str) -> str:
        seen.append(observation)
        return "rock"

    env = SeatEnv(RockPaperScissorsEnv(rounds=2), rock, seat="player_0")
    env.reset(seed=0)
    assert env.step("paper")[1:3] == (1.0, False)
    obs, reward, terminated, _, _ = env.step("scissors")
    assert (reward, terminated) == (-1.0, True) and "player_1 rock" in obs
    assert seen[0].startswith("Rock-paper-scissors") and "Round 1" in seen[1]


def test_seat_config_errors() -> None:
    with pytest.raises(ConfigError, match="seat 'third'"):
        SeatEnv(NimEnv(), _optimal, seat="third")
    with pytest.raises(ConfigError, match="no policy for seat 'second'"):
        SeatEnv(NimEnv(), {"first": _optimal}, seat="first")
