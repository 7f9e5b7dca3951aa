"""GEM-style multi-agent code (gem.multiagent) on gem-core: GEM's API, its fixes, the bridge to gem-core's contract."""

from __future__ import annotations

from typing import Any

import pytest

from gem.multiagent import AgentSelector, MultiAgentEnv
from gem_core.episode import EpisodeEngine, TurnRequest
from gem_core.errors import (
    AgentError,
    AgentFinished,
    ConfigError,
    MissingActions,
    NotYourTurn,
    ResetNeeded,
    UnknownAgent,
)
from gem_core.multiagent import check_multiagent_env
from gem_core.multiagent.engine import play_multiagent


class Tally(MultiAgentEnv):
    """Written the GEM way: 'good' scores 1, 'bad' -1, 'exit' ends the agent, a coin flip at reset, 4 steps."""

    def __init__(self, mode: str = "sequential", num_agents: int = 3) -> None:
        super().__init__()
        self.possible_agents = [f"agent_{i}" for i in range(num_agents)]
        self.agent_selector = AgentSelector(self.possible_agents, mode=mode)
        self.steps = 0
        self.coin = 0

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:  # type: ignore[override]
        self.steps = 0
        _, infos = super().reset(seed, options)
        self.coin = int(self.np_random.integers(2))
        return {a: self.observe(a) for a in self.agents}, infos

    def observe(self, agent: str) -> str:
        return f"step {self.steps} coin {self.coin}: {agent}"

    def _process_actions(self, actions: dict[str, str]) -> Any:
        rewards = {a: 1.0 if "good" in t else -1.0 if "bad" in t else 0.0 for a, t in actions.items()}
        for agent, text in actions.items():
            if text == "exit":
                self.terminations[agent] = True
        self.steps += 1
        if self.steps >= 4:
            for agent in self.agents:
                self.truncations[agent] = True
        return {a: self.observe(a) for a in actions}, rewards, self.terminations, self.truncations, self.infos


def test_reset_with_a_seed_works_and_is_reproducible() -> None:
    env = Tally()
    obs, infos = env.reset(seed=3)  # GEM 0.1 raises AttributeError here
    coin = env.coin
    assert set(obs) == set(infos) == {"agent_0", "agent_1", "agent_2"}
    assert all(env.reset(seed=3) and env.coin == coin for _ in range(3))


def test_sequential_turns_and_cumulative_rewards() -> None:
    env = Tally()
    env.reset(seed=0)
    for agent, text in [("agent_0", "good"), ("agent_1", "bad"), ("agent_2", "x")]:
        assert env.agent_selector is not None and env.agent_selector.get_active_agents() == [agent]
        env.step({agent: text})
    assert [env.get_state(a)[1] for a in env.agents] == [1.0, -1.0, 0.0]


@pytest.mark.parametrize(
    ("actions", "error"),
    [
        ("agent_0", AgentError),
        ({}, MissingActions),
        ({"agent_1": "x"}, NotYourTurn),
        ({"agent_9": "x"}, UnknownAgent),
    ],
    ids=["not-a-dict", "missing", "out-of-turn", "unknown"],
)
def test_wrong_agents_raise_typed_errors_that_are_value_errors(actions: Any, error: type[Exception]) -> None:
    env = Tally()
    env.reset(seed=0)
    with pytest.raises(error) as caught:
        env.step(actions)
    assert isinstance(caught.value, ValueError)  # what GEM code catches
    assert env.steps == 0


def test_finished_agents_keep_their_flags_in_the_returned_dicts_and_cannot_act() -> None:
    env = Tally(mode="parallel")
    env.reset(seed=0)
    _, _, terms, _, _ = env.step({"agent_0": "x", "agent_1": "exit", "agent_2": "x"})
    assert terms["agent_1"] is True and "agent_1" not in env.agents  # GEM's dict loses agent_1
    with pytest.raises(AgentFinished):
        env.step({"agent_0": "x", "agent_1": "x", "agent_2": "x"})


def test_episode_order_messages_and_agent_management() -> None:
    env = Tally(mode="parallel", num_agents=2)
    with pytest.raises(ResetNeeded):
        env.step({"agent_0": "x"})
    env.reset(seed=0)
    env.add_agent("agent_9")
    assert env.agent_selector is not None and "agent_9" in env.agent_selector.get_active_agents()
    env.remove_agent("agent_9")
    env.send_message("agent_0", "agent_1", "hi")
    env.broadcast_message("agent_1", "all")
    assert [m["to"] for m in env.shared_memory] == ["agent_1", "agent_0"]
    for bad in (lambda: env.send_message("agent_0", "nobody", "x"), lambda: env.broadcast_message("nobody", "x")):
        with pytest.raises(UnknownAgent):
            bad()
    for _ in range(4):
        env.step(dict.fromkeys(env.agents, "x"))
    assert env.agents == []
    with pytest.raises(ResetNeeded, match="every agent finished"):
        env.step({})


def test_agent_selector_cycles_and_refuses_unknown_modes() -> None:
    selector = AgentSelector(["a", "b", "c"])
    seen = [selector.selected]
    for _ in range(3):
        selector.next()
        seen.append(selector.selected)
    assert seen == ["a", "b", "c", "a"] and selector.is_first()
    selector.remove_agent("a")
    assert selector.selected == "b"
    selector.remove_agent("b")
    selector.remove_agent("c")
    assert selector.selected is None and selector.get_active_agents() == []
    with pytest.raises(ConfigError):
        AgentSelector(["a"], mode="round-robin")


@pytest.mark.parametrize("mode", ["sequential", "parallel"], ids=str)
def test_a_gem_env_keeps_gem_cores_contract_through_the_bridge(mode: str) -> None:
    check_multiagent_env(Tally(mode=mode).to_gem_core(), env_factory=lambda: Tally(mode=mode).to_gem_core())


def test_a_gem_env_plays_on_the_episode_engine_one_record_per_agent() -> None:
    def good(request: TurnRequest) -> str:
        return "good"

    result = play_multiagent(EpisodeEngine(), Tally(num_agents=2).to_gem_core(), good, seed=0)
    assert result.returns == {"agent_0": 2.0, "agent_1": 2.0}
    assert {a: len(e.turns) for a, e in result.episodes.items()} == {"agent_0": 2, "agent_1": 2}
    assert all(e.truncated for e in result.episodes.values())
