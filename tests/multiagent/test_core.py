"""The multi-agent contract (gem_core.multiagent.core): shapes, typed refusals, seeding, episode order."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gem_core
from gem_core.errors import (
    AgentError,
    AgentFinished,
    EnvResultError,
    InvalidAction,
    MissingActions,
    NotYourTurn,
    ResetNeeded,
    UnknownAgent,
)
from gem_core.multiagent import MultiResetReturn, MultiStepReturn, TurnBasedEnv
from gem_core.multiagent.reference import NimEnv, RockPaperScissorsEnv


def test_registered_ids_build_both_shapes() -> None:
    nim = gem_core.make("core:Nim-v0")
    rps = gem_core.make("core:RockPaperScissors-v0")
    assert isinstance(nim, NimEnv) and not nim.parallel
    assert isinstance(rps, RockPaperScissorsEnv) and rps.parallel
    assert "core:Nim-v0" in gem_core.list_envs(tag="multi-agent")
    assert gem_core.spec("core:Nim-v0").distribution == "gem-core"


def test_reset_briefs_every_agent_and_seeds_like_single_agent_envs() -> None:
    env = NimEnv()
    obs, infos = env.reset(seed=7)
    assert set(obs) == set(infos) == {"first", "second"}
    assert env.agents == ["first", "second"] and env.agent_selection == "first"
    pile = env.pile
    env.reset(seed=7)
    assert env.pile == pile  # same seed, same episode
    piles = {env.reset()[0]["first"] for _ in range(20)}  # None continues the stream
    assert len(piles) > 1
    assert env.seed_used == 7


@pytest.mark.parametrize("when", ["before-reset", "after-end"], ids=str)
def test_step_outside_an_episode_raises_reset_needed(when: str) -> None:
    env = NimEnv()
    if when == "after-end":
        env.reset(seed=0)
        env.step("0")  # an illegal move forfeits: the episode ends
        assert env.episode_over
    with pytest.raises(ResetNeeded, match="reset"):
        env.step("1")


@pytest.mark.parametrize(
    ("actions", "error"),
    [
        ({"nobody": "1"}, UnknownAgent),
        ({"second": "1"}, NotYourTurn),
        ({"first": "1", "second": "1"}, NotYourTurn),
        ({"first": 1}, InvalidAction),
        (["first"], AgentError),
    ],
    ids=["unknown", "out-of-turn", "two-at-once", "not-text", "not-a-dict"],
)
def test_turn_based_refusals_are_typed_and_change_nothing(actions: Any, error: type[Exception]) -> None:
    env = NimEnv()
    env.reset(seed=3)
    pile = env.pile
    with pytest.raises(error):
        env.step(actions)
    assert env.pile == pile and env.agent_turns == {"first": 0, "second": 0} and env.agent_selection == "first"


def test_parallel_refusals_name_the_agents() -> None:
    env = RockPaperScissorsEnv()
    env.reset(seed=0)
    with pytest.raises(MissingActions, match="player_1"):
        env.step({"player_0": "rock"})
    with pytest.raises(AgentError, match="simultaneous"):
        env.step("rock")
    with pytest.raises(UnknownAgent):
        env.step({"player_0": "rock", "player_1": "rock", "player_9": "rock"})
    assert env.round == 0


def test_action_for_a_finished_agent() -> None:
    class ThreeSeats(TurnBasedEnv):
        """Three agents; 'quit' ends the mover's part only."""

        possible_agents = ("a", "b", "c")

        def _reset(self, options: dict[str, Any] | None) -> MultiResetReturn:
            self._selection = "a"
            return dict.fromkeys(self.possible_agents, "go"), {}

        def _turn(self, agent: str, action: str) -> MultiStepReturn:
            live = self.agents
            nxt = live[(live.index(agent) + 1) % len(live)]
            if action == "quit":
                rest = [a for a in live if a != agent]
                nxt = rest[(rest.index(nxt) if nxt in rest else 0)] if rest else agent
            self._selection = nxt
            return {nxt: "your move"}, {}, {agent: action == "quit"}, {}, {}

    env = ThreeSeats()
    env.reset(seed=0)
    env.step("quit")
    assert env.agents == ["b", "c"]
    with pytest.raises(AgentFinished, match="'a' already finished"):
        env.step({"a": "x"})
    env.step("quit")
    env.step("quit")
    assert env.episode_over
    with pytest.raises(ResetNeeded):
        env.step("x")


@pytest.mark.parametrize(
    "broken",
    ["no-briefing", "stray-agent", "bad-reward", "nan-reward", "no-obs-for-next", "selection-finished"],
    ids=str,
)
def test_env_results_that_break_the_contract_are_named(broken: str) -> None:
    class Broken(TurnBasedEnv):
        possible_agents = ("a", "b")

        def _reset(self, options: dict[str, Any] | None) -> MultiResetReturn:
            self._selection = "a"
            if broken == "no-briefing":
                return {"a": "hi"}, {}
            return {"a": "hi", "b": "hi"}, {}

        def _turn(self, agent: str, action: str) -> MultiStepReturn:
            self._selection = "b"
            obs: dict[str, str] = {"b": "go"}
            rewards: dict[str, Any] = {}
            terms: dict[str, bool] = {}
            if broken == "stray-agent":
                rewards = {"z": 1.0}
            elif broken == "bad-reward":
                rewards = {"a": "1"}
            elif broken == "nan-reward":
                rewards = {"a": float("nan")}
            elif broken == "no-obs-for-next":
                obs = {}
            elif broken == "selection-finished":
                terms = {"b": True}
            return obs, rewards, terms, {}, {}

    env = Broken()
    with pytest.raises(EnvResultError):
        env.reset(seed=0)
        env.step("x")


# ----------------------------------------------------------------------------- property: random schedules


def _model_nim(pile: int, schedule: list[tuple[str, str]]) -> list[str]:
    """An independent Nim referee: what each call of the schedule must do ('ok', an error name, or 'over')."""
    turn, over, out = "first", False, []
    for agent, text in schedule:
        if over:
            out.append("ResetNeeded")
            continue
        if agent not in ("first", "second"):
            out.append("UnknownAgent")
            continue
        if agent != turn:
            out.append("NotYourTurn")
            continue
        digits = [int(t) for t in text.split() if t.lstrip("-").isdigit()]
        take = digits[-1] if digits else None
        if take is None or not 1 <= take <= min(3, pile):
            over = True
            out.append("forfeit")
            continue
        pile -= take
        if pile == 0:
            over = True
            out.append("win")
            continue
        turn = "second" if turn == "first" else "first"
        out.append("ok")
    return out


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    schedule=st.lists(
        st.tuples(st.sampled_from(["first", "second", "ghost"]), st.sampled_from(["1", "2", "3", "0", "4", "x"])),
        max_size=25,
    ),
)
def test_random_schedules_match_an_independent_referee(seed: int, schedule: list[tuple[str, str]]) -> None:
    env = NimEnv()
    env.reset(seed=seed)
    expected = _model_nim(env.pile, schedule)
    totals = {"first": 0.0, "second": 0.0}
    for (agent, text), want in zip(schedule, expected, strict=True):
        errors = {"ResetNeeded": ResetNeeded, "UnknownAgent": UnknownAgent, "NotYourTurn": NotYourTurn}
        if want in errors:
            before = (env.pile, env.agent_turns)
            with pytest.raises(errors[want]):
                env.step({agent: text})
            assert (env.pile, env.agent_turns) == before
            continue
        _, rewards, terms, truncs, infos = env.step({agent: text})
        for a, r in rewards.items():
            totals[a] += r
        if want in ("forfeit", "win"):
            winner = agent if want == "win" else ("second" if agent == "first" else "first")
            assert rewards[winner] == 1.0 and infos[winner]["outcome"] == "win"
            assert all(terms.values()) and not any(truncs.values()) and env.episode_over
        else:
            assert not any(terms.values()) and env.agent_selection != agent
    assert sum(totals.values()) == 0.0  # zero-sum, whatever the schedule
