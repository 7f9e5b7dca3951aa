"""One seat of a multi-agent env as a single-agent :class:`~gem_core.Env`, the other seats played by policies.

This is how a trainer or ``gem eval`` that knows single-agent envs plays a game against a fixed
opponent (a scripted one, another model): the env it sees is an ordinary ``Env``, and the
opponents act inside ``step``. Self-play, with the trained model in every seat, goes through the
multi-agent episode engine instead (:func:`gem_core.multiagent.engine.play_multiagent`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from gem_core.core import Env, ResetReturn, StepReturn
from gem_core.errors import ConfigError, ResetNeeded
from gem_core.multiagent.core import MultiAgentEnv

__all__ = ["SeatEnv", "SeatPolicy"]


class SeatPolicy(Protocol):
    """Plays a seat: given the env (its state, for scripted players), the agent and the news since its last move.

    A call returns the agent's action text.
    """

    def __call__(self, env: MultiAgentEnv, agent: str, observation: str) -> str: ...


class SeatEnv(Env):
    """``env`` seen from ``seat``: ``step`` applies the seat's action, then the opponents' until the seat is next.

    The observation of a step joins everything the seat was told since its last action (its own
    move's result, the opponents' moves); the reward sums the seat's rewards over those steps
    (a loss on an opponent's move counts); ``terminated``/``truncated`` are the seat's own.
    ``info`` is the seat's last info, with ``seat`` added.

    Args:
        env: The multi-agent env (turn-based or simultaneous).
        opponents: A policy per other seat, or one policy for all of them.
        seat: The agent played through ``step``; ``None`` draws one per episode from this env's RNG
            (both sides of a game get trained against the opponent).

    Raises:
        ConfigError: ``seat`` is not an agent, or a seat has no policy.
    """

    metadata = {"multi_turn": True}

    def __init__(
        self, env: MultiAgentEnv, opponents: SeatPolicy | Mapping[str, SeatPolicy], seat: str | None = None
    ) -> None:
        if seat is not None and seat not in env.possible_agents:
            raise ConfigError(f"seat {seat!r} is not an agent of {env!r}; choose one of {list(env.possible_agents)}")
        self.env = env
        self.fixed_seat = seat
        self.seat = seat or env.possible_agents[0]
        self._policies = opponents
        self._news: dict[str, list[str]] = {}
        self._finished = False
        self._early: tuple[float, bool, bool, dict[str, Any]] | None = None
        self._carry = 0.0
        if isinstance(opponents, Mapping):
            for agent in env.possible_agents:
                if agent != seat and agent not in opponents and seat is not None:
                    raise ConfigError(f"no policy for seat {agent!r}; opponents names {sorted(opponents)}")

    def _policy(self, agent: str) -> SeatPolicy:
        if isinstance(self._policies, Mapping):
            try:
                return self._policies[agent]
            except KeyError:
                raise ConfigError(f"no policy for seat {agent!r}; opponents names {sorted(self._policies)}") from None
        return self._policies

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        agents = self.env.possible_agents
        self.seat = self.fixed_seat or agents[int(self.np_random.integers(len(agents)))]
        observations, infos = self.env.reset(seed=seed, options=options)
        self._news = {a: [observations[a]] for a in agents}
        self._finished = False
        # Opponents seated before the seat move now; if that ends the seat's part (an opponent's forfeit),
        # the first step reports it without using its action (a reset cannot end an episode).
        early = self._until_seat()
        self._early = early if (early[1] or early[2]) else None
        self._carry = 0.0 if self._early else early[0]
        return self._take_news(), {**infos[self.seat], "seat": self.seat}

    def step(self, action: str) -> StepReturn:
        if self._finished or not self._news:
            raise ResetNeeded("SeatEnv.step() called before reset() or after the episode ended: call reset() first")
        if self._early is not None:
            reward, terminated, truncated, info = self._early
            self._finished = True
            return self._take_news(), reward, terminated, truncated, {**info, "seat": self.seat, "action_unused": True}
        actions = {self.seat: action}
        if self.env.parallel:
            for agent in self.env.agents:
                if agent != self.seat:
                    actions[agent] = self._ask(agent)
        reward, terminated, truncated, info = self._apply(actions)
        reward += self._carry
        self._carry = 0.0
        if not (terminated or truncated):
            more, terminated, truncated, more_info = self._until_seat()
            reward += more
            info = {**info, **more_info}
        self._finished = terminated or truncated
        return self._take_news(), reward, terminated, truncated, {**info, "seat": self.seat}

    def _ask(self, agent: str) -> str:
        news = "\n\n".join(self._news.get(agent, []))
        self._news[agent] = []
        return self._policy(agent)(self.env, agent, news)

    def _apply(self, actions: dict[str, str]) -> tuple[float, bool, bool, dict[str, Any]]:
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        for agent, text in observations.items():
            self._news.setdefault(agent, []).append(text)
        seat = self.seat
        if seat not in rewards:
            return 0.0, False, False, {}
        return rewards[seat], terminations[seat], truncations[seat], infos[seat]

    def _until_seat(self) -> tuple[float, bool, bool, dict[str, Any]]:
        """Let the opponents move (turn-based) until the seat acts next or its part ends."""
        total, terminated, truncated = 0.0, False, False
        info: dict[str, Any] = {}
        env = self.env
        while not env.parallel and not env.episode_over and env.agent_selection != self.seat:
            agent = env.agent_selection
            reward, terminated, truncated, step_info = self._apply({agent: self._ask(agent)})
            total += reward
            info = step_info or info
            if terminated or truncated:
                break
        return total, terminated, truncated, info

    def _take_news(self) -> str:
        text = "\n\n".join(t for t in self._news.get(self.seat, []) if t)
        self._news[self.seat] = []
        return text

    def sample_random_action(self) -> str:
        return self.env.sample_random_action(self.seat)

    def close(self) -> None:
        self.env.close()
