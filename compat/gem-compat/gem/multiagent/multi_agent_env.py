"""GEM's multi-agent API (``MultiAgentEnv``, ``AgentSelector``) on gem-core.

GEM code keeps its shape: ``possible_agents`` and an ``agent_selector`` set in ``__init__``, an
``observe(agent)`` and a ``_process_actions(actions)`` that sets ``self.terminations`` and friends,
``step`` with a dict of actions, cumulative rewards, ``add_agent``/``remove_agent``, messages into
``shared_memory``. What differs from GEM 0.1, each a fix:

* ``reset(seed=...)`` works (GEM's raises ``AttributeError``): it seeds ``np_random``/``py_random``
  (never the process-global RNGs, which GEM's multi-agent reset did not touch either);
* wrong agents raise gem-core's typed errors, all ``ValueError`` as in GEM: ``AgentError`` (actions
  not a dict), ``MissingActions``, ``NotYourTurn`` (an inactive agent acted in turn),
  ``UnknownAgent`` (an unknown agent acted, sent, received or was asked about), ``AgentFinished``;
  ``AgentSelector(mode=...)`` refuses an unknown mode at once (``ConfigError``);
* ``step`` before ``reset``, or after every agent finished, raises ``ResetNeeded``;
* the dicts ``step`` returns are taken before finished agents are removed, so they still hold the
  finished agents' flags and infos (GEM's lose them);
* :meth:`MultiAgentEnv.to_gem_core` gives the env gem-core's multi-agent contract, so it runs through
  ``check_multiagent_env``, the episode engine (``play_multiagent``) and the PettingZoo adapters.
"""

from __future__ import annotations

import abc
from typing import Any

import gem_core
import gem_core.multiagent as ma
from gem.core import Env
from gem_core.errors import (
    AgentError,
    AgentFinished,
    ConfigError,
    MissingActions,
    NotYourTurn,
    ResetNeeded,
    UnknownAgent,
)

__all__ = ["AgentSelector", "MultiAgentEnv"]

StepDicts = tuple[dict[str, str], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict[str, Any]]]


class AgentSelector:
    """Who acts: one agent at a time in order (``"sequential"``) or every agent (``"parallel"``).

    Raises:
        ConfigError: an unknown ``mode``.
    """

    def __init__(self, agents: list[str], mode: str = "sequential") -> None:
        if mode not in ("sequential", "parallel"):
            raise ConfigError(f"AgentSelector mode must be 'sequential' or 'parallel', got {mode!r}")
        self.mode = mode
        self._agents = list(agents)
        self._current_idx = 0
        self.selected: str | None = self._agents[0] if self._agents else None

    def get_active_agents(self) -> list[str]:
        """The agents that act next."""
        if self.mode == "sequential":
            return [self.selected] if self.selected else []
        return list(self._agents)

    def next(self) -> None:
        """Move to the next agent (sequential mode)."""
        if self.mode == "sequential" and self._agents:
            self._current_idx = (self._current_idx + 1) % len(self._agents)
            self.selected = self._agents[self._current_idx]

    def is_first(self) -> bool:
        """Whether the first agent is selected."""
        return self._current_idx == 0

    def is_last(self) -> bool:
        """Whether the last agent is selected."""
        return self._current_idx == len(self._agents) - 1

    def reinit(self, agents: list[str]) -> None:
        """Start over with ``agents``."""
        self._agents = list(agents)
        self._current_idx = 0
        self.selected = self._agents[0] if self._agents else None

    def add_agent(self, agent: str) -> None:
        """Append ``agent`` to the order."""
        if agent not in self._agents:
            self._agents.append(agent)

    def remove_agent(self, agent: str) -> None:
        """Drop ``agent``; the selection moves to the agent after it (or ``None`` when none is left)."""
        if agent not in self._agents:
            return
        index = self._agents.index(agent)
        self._agents.remove(agent)
        if not self._agents:
            self._current_idx, self.selected = 0, None
            return
        if index <= self._current_idx:
            self._current_idx = max(0, self._current_idx - 1)
        self._current_idx %= len(self._agents)
        self.selected = self._agents[self._current_idx]


class MultiAgentEnv(Env):
    """GEM's multi-agent env base; see the module docstring for what is fixed."""

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents: list[str] = []
        self.agents: list[str] = []
        self.terminations: dict[str, bool] = {}
        self.truncations: dict[str, bool] = {}
        self.rewards: dict[str, float] = {}
        self.infos: dict[str, dict[str, Any]] = {}
        self._cumulative_rewards: dict[str, float] = {}
        self.agent_selector: AgentSelector | None = None
        self.shared_memory: list[dict[str, str]] = []
        self.global_context = ""
        self._started = False

    def _active(self) -> list[str]:
        return self.agent_selector.get_active_agents() if self.agent_selector else list(self.agents)

    def step(self, actions: dict[str, str]) -> StepDicts:  # type: ignore[override]
        """Apply the active agents' actions; returns the step's dicts (finished agents' entries kept)."""
        if not isinstance(actions, dict):
            raise AgentError(f"actions must be a dict {{agent: text}}, got {type(actions).__name__}")
        if not self._started or not self.agents:
            raise ResetNeeded(
                f"{type(self).__name__}.step() called "
                + ("before reset()" if not self._started else "after every agent finished")
                + ": call reset() first"
            )
        active = self._active()
        for agent in actions:
            if agent in active:
                continue
            if agent not in self.possible_agents and agent not in self.agents:
                raise UnknownAgent(f"agent {agent!r} is not in the env ({self.agents})", agent=agent)
            if agent not in self.agents:
                raise AgentFinished(f"agent {agent!r} already finished; the live agents are {self.agents}", agent=agent)
            raise NotYourTurn(f"agent {agent!r} is not active now; the active agents are {active}", agent=agent)
        ended = {a for a in active if self.terminations.get(a, True) or self.truncations.get(a, True)}
        missing = [a for a in active if a not in ended and a not in actions]
        if missing:
            raise MissingActions(f"missing actions of the active agents {missing}", agent=missing[0])
        observations, rewards, terminations, truncations, infos = self._process_actions(actions)
        result: StepDicts = (
            dict(observations),
            dict(rewards),
            dict(terminations),
            dict(truncations),
            {a: dict(i) for a, i in infos.items()},
        )
        for agent in self.agents:
            if agent in rewards:
                self._cumulative_rewards[agent] = self._cumulative_rewards.get(agent, 0.0) + rewards[agent]
        self._remove_dead_agents()
        if self.agent_selector:
            self.agent_selector.next()
        return result

    @abc.abstractmethod
    def _process_actions(self, actions: dict[str, str]) -> StepDicts:
        """Apply the actions; return observations, rewards, terminations, truncations, infos."""

    def reset(  # type: ignore[override]
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, str], dict[str, Any]]:
        """Start over: every possible agent live, memory cleared, the selector reinitialised, an observation each."""
        # gem_core's seeding only: GEM's multi-agent reset never seeded the global RNGs (gem.Env's does)
        gem_core.Env.reset(self, seed=seed, options=options)
        self.agents = list(self.possible_agents)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self.infos = {a: {} for a in self.agents}
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.shared_memory = []
        self.global_context = ""
        if self.agent_selector:
            self.agent_selector.reinit(self.agents)
        self._started = True
        return {a: self.observe(a) for a in self.agents}, {a: {} for a in self.agents}

    @abc.abstractmethod
    def observe(self, agent: str) -> str:
        """``agent``'s current observation."""

    def _known(self, agent: str, role: str) -> None:
        if agent not in self.agents:
            raise UnknownAgent(f"{role} {agent!r} is not in the env ({self.agents})", agent=agent)

    def get_state(self, agent: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """``(observation, cumulative reward, terminated, truncated, info)`` of a live agent."""
        self._known(agent, "agent")
        return (
            self.observe(agent),
            self._cumulative_rewards.get(agent, 0.0),
            self.terminations.get(agent, False),
            self.truncations.get(agent, False),
            self.infos.get(agent, {}),
        )

    def get_active_states(self) -> dict[str, tuple[str, float, bool, bool, dict[str, Any]]]:
        """:meth:`get_state` of every active live agent."""
        return {a: self.get_state(a) for a in self._active() if a in self.agents}

    def add_agent(self, agent_id: str) -> None:
        """Add a live agent (and to the selector)."""
        if agent_id in self.agents:
            return
        self.agents.append(agent_id)
        self.terminations[agent_id] = False
        self.truncations[agent_id] = False
        self.rewards[agent_id] = 0.0
        self.infos[agent_id] = {}
        self._cumulative_rewards[agent_id] = 0.0
        if self.agent_selector:
            self.agent_selector.add_agent(agent_id)

    def remove_agent(self, agent_id: str) -> None:
        """Remove a live agent and its entries (and from the selector)."""
        if agent_id not in self.agents:
            return
        self.agents.remove(agent_id)
        for table in (self.terminations, self.truncations, self.rewards, self.infos, self._cumulative_rewards):
            table.pop(agent_id, None)
        if self.agent_selector:
            self.agent_selector.remove_agent(agent_id)

    def _remove_dead_agents(self) -> None:
        for agent in [a for a in self.agents if self.terminations.get(a, False) or self.truncations.get(a, False)]:
            self.remove_agent(agent)

    def send_message(self, from_agent: str, to_agent: str, message: str) -> None:
        """Append a message from one live agent to another to ``shared_memory``."""
        self._known(from_agent, "sender")
        self._known(to_agent, "receiver")
        self.shared_memory.append({"from": from_agent, "to": to_agent, "message": message})

    def broadcast_message(self, from_agent: str, message: str) -> None:
        """A message from a live agent to every other live agent."""
        self._known(from_agent, "sender")
        for agent in self.agents:
            if agent != from_agent:
                self.shared_memory.append({"from": from_agent, "to": agent, "message": message})

    def to_gem_core(self) -> ma.MultiAgentEnv:
        """This env under gem-core's multi-agent contract (turn-based for a sequential selector, else parallel)."""
        sequential = self.agent_selector is not None and self.agent_selector.mode == "sequential"
        return _TurnBased(self) if sequential else _Parallel(self)


class _Bridge:
    gem_env: MultiAgentEnv

    def _start(self, seed: int | None, options: dict[str, Any] | None) -> ma.MultiResetReturn:
        observations, infos = self.gem_env.reset(seed, options)
        return dict(observations), {a: dict(i) for a, i in infos.items()}

    def _advance(self, actions: dict[str, str]) -> ma.MultiStepReturn:
        observations, rewards, terms, truncs, infos = self.gem_env.step(actions)
        observations = dict(observations)
        # gem-core hands the next actors an observation each: GEM envs report only the actors'
        for agent in self.gem_env._active():
            if agent in self.gem_env.agents and agent not in observations:
                observations[agent] = self.gem_env.observe(agent)
        live = set(actions) | set(rewards) | set(terms) | set(truncs)
        keep = [a for a in live if a in self._before]  # type: ignore[attr-defined]
        return (
            {a: o for a, o in observations.items() if a in self._before},  # type: ignore[attr-defined]
            {a: rewards[a] for a in keep if a in rewards},
            {a: terms[a] for a in keep if a in terms},
            {a: truncs[a] for a in keep if a in truncs},
            {a: infos[a] for a in keep if a in infos},
        )


class _TurnBased(_Bridge, ma.TurnBasedEnv):
    def __init__(self, gem_env: MultiAgentEnv) -> None:
        self.gem_env = gem_env
        self.possible_agents = tuple(gem_env.possible_agents)

    def _reset(self, options: dict[str, Any] | None) -> ma.MultiResetReturn:
        out = self._start(vars(self)["_reset_seed"], options)
        selector = self.gem_env.agent_selector
        self._selection = (selector.selected or "") if selector is not None else ""
        return out

    def _turn(self, agent: str, action: str) -> ma.MultiStepReturn:
        self._before = self.agents
        result = self._advance({agent: action})
        selector = self.gem_env.agent_selector
        if selector is not None and selector.selected:
            self._selection = selector.selected
        return result


class _Parallel(_Bridge, ma.ParallelEnv):
    def __init__(self, gem_env: MultiAgentEnv) -> None:
        self.gem_env = gem_env
        self.possible_agents = tuple(gem_env.possible_agents)

    def _reset(self, options: dict[str, Any] | None) -> ma.MultiResetReturn:
        return self._start(vars(self)["_reset_seed"], options)

    def _joint(self, actions: dict[str, str]) -> ma.MultiStepReturn:
        self._before = self.agents
        return self._advance(actions)
