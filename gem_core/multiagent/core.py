"""Multi-agent text envs in PettingZoo's two shapes: agents in turn, and all at once.

Both shapes share one contract (:class:`MultiAgentEnv`):

* ``reset(*, seed=None, options=None) -> (observations, infos)``: a text briefing for every agent
  in ``possible_agents``; ``agents`` (the live ones) starts as all of them. Seeding is the
  single-agent env's: a seed reseeds :attr:`np_random`/:attr:`py_random`, ``None`` continues.
* ``step(actions) -> (observations, rewards, terminations, truncations, infos)``, every dict keyed
  by agent. ``rewards``, ``terminations``, ``truncations`` and ``infos`` hold every agent that was
  live before the step; ``observations`` only the agents with something new to read (the agents
  that act next always get one). An agent whose termination or truncation is true leaves
  ``agents``; the episode is over when no agent is left, and ``step`` then raises
  :class:`~gem_core.errors.ResetNeeded` (as before the first ``reset``).
* Turn-based envs (:class:`TurnBasedEnv`, PettingZoo's AEC shape) take the action of
  ``agent_selection``: ``step("text")`` or ``step({agent: "text"})``. Simultaneous envs
  (:class:`ParallelEnv`) take ``{agent: text}`` for every live agent.

Wrong agents get typed errors before the env's code runs (the env is unchanged):
:class:`~gem_core.errors.UnknownAgent`, :class:`~gem_core.errors.NotYourTurn`,
:class:`~gem_core.errors.AgentFinished`, :class:`~gem_core.errors.MissingActions`. A model's text is
never an error: a malformed move is the env's to judge (a penalty, a forfeit), as in single-agent envs.

Authors implement ``_reset(options)`` and ``_turn(agent, action)`` (turn-based) or
``_joint(actions)`` (simultaneous); the base class seeds, keeps ``agents`` and the episode order,
checks the actions and the results, and fills the defaults (reward 0, not finished, empty info).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from gem_core.core import _Seeded, require_text_action
from gem_core.errors import (
    AgentError,
    AgentFinished,
    EnvResultError,
    MissingActions,
    NotYourTurn,
    ResetNeeded,
    UnknownAgent,
)

if TYPE_CHECKING:
    from gem_core.registry import EnvSpec

__all__ = [
    "MultiAgentEnv",
    "MultiResetReturn",
    "MultiStepReturn",
    "ParallelEnv",
    "TurnBasedEnv",
]

#: ``reset`` returns a briefing per agent and an info dict per agent.
MultiResetReturn = tuple[dict[str, str], dict[str, dict[str, Any]]]
#: ``step`` returns observations, rewards, terminations, truncations and infos, each keyed by agent.
MultiStepReturn = tuple[dict[str, str], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict[str, Any]]]


class MultiAgentEnv(_Seeded, abc.ABC):
    """Base of both shapes; see the module docstring for the contract.

    Attributes:
        possible_agents: Every agent the env can have, in seat order (set by the subclass).
        agents: The agents whose part of the episode is running (empty before ``reset`` and after the end).
        parallel: ``True`` for simultaneous moves, ``False`` for agents in turn.
        agent_turns: Actions each agent took this episode.
        metadata: Class-level facts (``multi_turn``, ``zero_sum``...).
        spec: The :class:`~gem_core.registry.EnvSpec` it was made from (set by ``make``).
    """

    metadata: ClassVar[dict[str, Any]] = {}
    parallel: bool = False
    spec: EnvSpec | None = None
    possible_agents: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # _Seeded's single-agent episode guard reads 5-tuples; this contract keeps its own order, below.
        super(_Seeded, cls).__init_subclass__(**kwargs)

    # ------------------------------------------------------------------ public contract

    @property
    def agents(self) -> list[str]:
        """The live agents, in seat order (a copy)."""
        return list(vars(self).get("_live", []))

    @property
    def agent_turns(self) -> dict[str, int]:
        """Actions each agent took this episode."""
        return dict(vars(self).get("_turns", {}))

    @property
    def episode_over(self) -> bool:
        """Whether no episode is running (before the first ``reset``, or every agent finished)."""
        return not vars(self).get("_live")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> MultiResetReturn:
        """Start an episode: reseed when ``seed`` is given, every agent live, a briefing each.

        Returns:
            ``(observations, infos)`` with an entry for every agent.
        """
        if seed is not None or self._seed is None:
            self._seed_rngs(seed)
        agents = tuple(self.possible_agents)
        if not agents or len(set(agents)) != len(agents) or not all(isinstance(a, str) and a for a in agents):
            raise EnvResultError(
                f"{type(self).__name__}.possible_agents must be distinct non-empty strings, got {agents!r}"
            )
        vars(self)["_live"] = []  # a reset that raises leaves no episode running
        vars(self)["_reset_seed"] = seed
        result = self._reset(options)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise EnvResultError(
                f"{type(self).__name__}._reset() must return (observations, infos), got {result!r:.200}"
            )
        observations, infos = result
        self._check_keys("_reset() observations", observations, agents)
        self._check_keys("_reset() infos", infos, agents)
        missing = [a for a in agents if a not in observations]
        if missing:
            raise EnvResultError(
                f"{type(self).__name__}._reset() gave no briefing to {missing}: every agent needs its first observation"
            )
        obs = {a: self._text(observations[a], "_reset()", a) for a in agents}
        out_infos = {a: dict(infos.get(a, {})) for a in agents}
        vars(self)["_live"] = list(agents)
        vars(self)["_turns"] = dict.fromkeys(agents, 0)
        self._check_selection("_reset()", obs)
        return obs, out_infos

    def step(self, actions: str | Mapping[str, str]) -> MultiStepReturn:
        """Apply the acting agents' texts and advance the episode.

        Args:
            actions: Turn-based: the text of ``agent_selection`` (a ``str``), or ``{agent: text}``
                with that one agent. Simultaneous: ``{agent: text}`` for every live agent.

        Raises:
            ResetNeeded: no episode is running.
            UnknownAgent, NotYourTurn, AgentFinished, MissingActions: the wrong agents acted
                (nothing changed; the message names them and who may act).
            InvalidAction: an action is not a ``str``.
        """
        if self.episode_over:
            started = "_turns" in vars(self)
            raise ResetNeeded(
                f"{type(self).__name__}.step() called "
                + ("after the episode ended (every agent terminated or truncated)" if started else "before reset()")
                + ": call reset() first"
            )
        chosen = self._check_actions(actions)
        before = self.agents
        result = self._apply(chosen)
        return self._settle(result, before, chosen)

    def acting_agents(self) -> list[str]:
        """The agents whose actions the next ``step`` takes (``[agent_selection]`` or every live agent)."""
        if self.episode_over:
            return []
        return self.agents if self.parallel else [self.agent_selection]

    @property
    def agent_selection(self) -> str:
        """The agent to act next (turn-based envs)."""
        raise AttributeError(f"{type(self).__name__} is a simultaneous-move env: every live agent acts each step")

    def close(self) -> None:
        """Release resources; idempotent."""

    def sample_random_action(self, agent: str) -> str:
        """A random valid-looking action of ``agent``, for smoke tests and checks.

        Raises:
            NotImplementedError: the env does not provide one.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement sample_random_action(agent)")

    @property
    def unwrapped(self) -> MultiAgentEnv:
        """The innermost env (itself for an unwrapped env)."""
        return self

    def __enter__(self) -> MultiAgentEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        sid = f" {self.spec.id}" if self.spec is not None else ""
        return f"<{type(self).__name__}{sid}>"

    # ------------------------------------------------------------------ for authors

    @abc.abstractmethod
    def _reset(self, options: dict[str, Any] | None) -> MultiResetReturn:
        """Set up the episode (the RNGs are seeded already) and brief every agent.

        Turn-based envs set ``self._selection`` (see :class:`TurnBasedEnv`) here.
        """

    @abc.abstractmethod
    def _apply(self, actions: dict[str, str]) -> MultiStepReturn:
        """Apply checked actions (each acting agent's text); return the step's dicts (defaults filled later)."""

    # ------------------------------------------------------------------ checks

    def _check_actions(self, actions: str | Mapping[str, str]) -> dict[str, str]:
        live = self.agents
        if isinstance(actions, str):
            if self.parallel:
                raise AgentError(
                    f"{type(self).__name__} is a simultaneous-move env: step() takes {{agent: text}} for every live "
                    f"agent ({live}), not one str"
                )
            actions = {self.agent_selection: actions}
        if not isinstance(actions, Mapping):
            raise AgentError(
                f"{type(self).__name__}.step() takes {{agent: text}} (or one str for the agent in turn), "
                f"got {type(actions).__name__}"
            )
        for agent in actions:
            if agent not in self.possible_agents:
                raise UnknownAgent(
                    f"{type(self).__name__} has no agent {agent!r}; its agents are {list(self.possible_agents)}",
                    agent=str(agent),
                )
            if agent not in live:
                raise AgentFinished(
                    f"agent {agent!r} already finished this episode (terminated or truncated); the live agents are "
                    f"{live}",
                    agent=agent,
                )
        if self.parallel:
            missing = [a for a in live if a not in actions]
            if missing:
                raise MissingActions(
                    f"{type(self).__name__} moves every live agent at once: step() lacks the actions of {missing} "
                    f"(give {{agent: text}} for each of {live})",
                    agent=missing[0] if len(missing) == 1 else None,
                )
        else:
            turn = self.agent_selection
            others = [a for a in actions if a != turn]
            if others:
                raise NotYourTurn(
                    f"it is {turn!r}'s turn, not {others[0]!r}'s: step() takes the action of agent_selection "
                    f"({turn!r}) alone",
                    agent=others[0],
                )
        for agent, text in actions.items():
            require_text_action(self, text, f"agent {agent!r}'s reply")
        return dict(actions)

    def _check_keys(self, where: str, value: object, allowed: tuple[str, ...] | list[str]) -> None:
        if not isinstance(value, Mapping):
            raise EnvResultError(
                f"{type(self).__name__}.{where} must be a dict keyed by agent, got {type(value).__name__}"
            )
        stray = [k for k in value if k not in allowed]
        if stray:
            raise EnvResultError(
                f"{type(self).__name__}.{where} has entries for {stray}, which are not among the agents {list(allowed)}"
            )

    def _text(self, value: object, where: str, agent: str) -> str:
        if not isinstance(value, str):
            raise EnvResultError(
                f"{type(self).__name__}.{where} observation of {agent!r} must be str, got {type(value).__name__}"
            )
        return value

    def _check_selection(self, where: str, observations: Mapping[str, str]) -> None:
        if self.parallel or self.episode_over:
            return
        turn = self.agent_selection
        if turn not in self.agents:
            raise EnvResultError(
                f"{type(self).__name__}.{where} left agent_selection at {turn!r}, which is not live ({self.agents})"
            )

    def _settle(self, result: object, before: list[str], acted: Mapping[str, str]) -> MultiStepReturn:
        name = type(self).__name__
        if not (isinstance(result, tuple) and len(result) == 5):
            raise EnvResultError(
                f"{name} step must return (observations, rewards, terminations, truncations, infos),"
                f" got {result!r:.200}"
            )
        observations, rewards, terminations, truncations, infos = result
        for label, part in (
            ("observations", observations),
            ("rewards", rewards),
            ("terminations", terminations),
            ("truncations", truncations),
            ("infos", infos),
        ):
            self._check_keys(f"step {label}", part, before)
        obs = {a: self._text(v, "step", a) for a, v in observations.items()}
        out_rewards: dict[str, float] = {}
        out_term: dict[str, bool] = {}
        out_trunc: dict[str, bool] = {}
        out_infos: dict[str, dict[str, Any]] = {}
        for agent in before:
            reward = rewards.get(agent, 0.0)
            if isinstance(reward, bool) or not isinstance(reward, (int, float, np.integer, np.floating)):
                raise EnvResultError(f"{name} step reward of {agent!r} must be a float, got {type(reward).__name__}")
            if not math.isfinite(float(reward)):
                raise EnvResultError(f"{name} step reward of {agent!r} must be finite, got {reward}")
            out_rewards[agent] = float(reward)
            for flags, out, label in ((terminations, out_term, "termination"), (truncations, out_trunc, "truncation")):
                flag = flags.get(agent, False)
                if not isinstance(flag, (bool, np.bool_)):
                    raise EnvResultError(f"{name} step {label} of {agent!r} must be bool, got {type(flag).__name__}")
                out[agent] = bool(flag)
            info = infos.get(agent, {})
            if not isinstance(info, dict):
                raise EnvResultError(f"{name} step info of {agent!r} must be dict, got {type(info).__name__}")
            out_infos[agent] = info
        turns: dict[str, int] = vars(self)["_turns"]
        for agent in acted:
            turns[agent] += 1
        vars(self)["_live"] = [a for a in before if not (out_term[a] or out_trunc[a])]
        if not self.episode_over:
            waiting = [a for a in self.acting_agents() if a not in obs]
            if waiting:
                raise EnvResultError(
                    f"{name} step gave no observation to {waiting}, who act next: an agent about to act must get one"
                )
            self._check_selection("step", obs)
        return obs, out_rewards, out_term, out_trunc, out_infos


class TurnBasedEnv(MultiAgentEnv):
    """Agents act one at a time (PettingZoo's AEC shape): ``step`` takes ``agent_selection``'s text.

    Authors implement ``_reset(options)`` (setting ``self._selection``, the first agent to act) and
    ``_turn(agent, action)``, which applies the move and sets ``self._selection`` to the next agent
    (ignored once every agent finished).
    """

    parallel = False
    _selection: str = ""

    @property
    def agent_selection(self) -> str:
        """The agent whose action the next ``step`` takes."""
        return self._selection

    def _apply(self, actions: dict[str, str]) -> MultiStepReturn:
        ((agent, text),) = actions.items()
        return self._turn(agent, text)

    @abc.abstractmethod
    def _turn(self, agent: str, action: str) -> MultiStepReturn:
        """Apply ``agent``'s text (any str: judge malformed moves, never raise for them)."""


class ParallelEnv(MultiAgentEnv):
    """Every live agent acts each step (PettingZoo's parallel shape): ``step`` takes ``{agent: text}`` for all.

    Authors implement ``_reset(options)`` and ``_joint(actions)``.
    """

    parallel = True

    def _apply(self, actions: dict[str, str]) -> MultiStepReturn:
        return self._joint(actions)

    @abc.abstractmethod
    def _joint(self, actions: dict[str, str]) -> MultiStepReturn:
        """Apply every live agent's text at once (any str: judge malformed moves, never raise for them)."""
