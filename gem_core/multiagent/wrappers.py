"""Wrappers of multi-agent envs: per-agent chat history, episode statistics and turn limits.

A wrapper is itself a :class:`~gem_core.multiagent.MultiAgentEnv` of the inner env's shape, so it
keeps the same checks and episode order; it forwards ``reset``/``step`` and reads the inner env's
``agent_selection``, RNGs and spec on every call (nothing is copied, nothing goes stale).
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from gem_core.errors import ConfigError
from gem_core.multiagent.core import MultiAgentEnv, MultiResetReturn, MultiStepReturn

if TYPE_CHECKING:
    from gem_core.registry import EnvSpec
    from gem_core.wrappers.chat import Message

__all__ = [
    "MultiAgentChatHistory",
    "MultiAgentEpisodeStatistics",
    "MultiAgentTimeLimit",
    "MultiAgentWrapper",
]


class MultiAgentWrapper(MultiAgentEnv):
    """Forwards to ``env``; subclasses override ``_on_reset`` and ``_on_step``.

    Args:
        env: The multi-agent env (or wrapper) to wrap.
    """

    def __init__(self, env: MultiAgentEnv) -> None:
        self.env = env
        self.parallel = env.parallel
        self.possible_agents = tuple(env.possible_agents)

    # the inner env's state, read live
    @property
    def spec(self) -> EnvSpec | None:
        return self.env.spec

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        self.env.spec = value

    @property
    def np_random(self) -> np.random.Generator:
        return self.env.np_random

    @property
    def py_random(self) -> random.Random:
        return self.env.py_random

    @property
    def seed_used(self) -> int | None:
        return self.env.seed_used

    @property
    def agent_selection(self) -> str:
        return self.env.agent_selection

    @property
    def unwrapped(self) -> MultiAgentEnv:
        return self.env.unwrapped

    def sample_random_action(self, agent: str) -> str:
        return self.env.sample_random_action(agent)

    def close(self) -> None:
        self.env.close()

    def _reset(self, options: dict[str, Any] | None) -> MultiResetReturn:
        observations, infos = self.env.reset(seed=vars(self)["_reset_seed"], options=options)
        return self._on_reset(observations, infos)

    def _apply(self, actions: dict[str, str]) -> MultiStepReturn:
        return self._on_step(actions, self.env.step(actions))

    def _on_reset(self, observations: dict[str, str], infos: dict[str, dict[str, Any]]) -> MultiResetReturn:
        return observations, infos

    def _on_step(self, actions: dict[str, str], result: MultiStepReturn) -> MultiStepReturn:
        return result


class MultiAgentChatHistory(MultiAgentWrapper):
    """Keeps each agent's chat: its briefing and news as user messages, its actions as assistant messages.

    News that reaches an agent between two of its actions is joined into one user message (chat
    templates want user and assistant to alternate). ``messages[agent]`` is readable at any time;
    each step also puts a copy into ``infos[agent]["messages"]`` for the agents it reports on.

    Args:
        env: The env.
        system_prompts: A system message per agent (or one str for all), placed first.
    """

    def __init__(self, env: MultiAgentEnv, system_prompts: str | dict[str, str] | None = None) -> None:
        super().__init__(env)
        if isinstance(system_prompts, str):
            system_prompts = dict.fromkeys(self.possible_agents, system_prompts)
        self.system_prompts = dict(system_prompts or {})
        unknown = [a for a in self.system_prompts if a not in self.possible_agents]
        if unknown:
            raise ConfigError(f"system_prompts names {unknown}, who are not agents of {self.possible_agents}")
        self.messages: dict[str, list[Message]] = {}

    def _add(self, agent: str, role: str, text: str) -> None:
        chat = self.messages[agent]
        if role == "user" and chat and chat[-1]["role"] == "user":
            chat[-1] = {"role": "user", "content": f"{chat[-1]['content']}\n\n{text}"}
        else:
            chat.append({"role": role, "content": text})

    def _on_reset(self, observations: dict[str, str], infos: dict[str, dict[str, Any]]) -> MultiResetReturn:
        self.messages = {}
        for agent in self.possible_agents:
            self.messages[agent] = []
            if agent in self.system_prompts:
                self._add(agent, "system", self.system_prompts[agent])
            self._add(agent, "user", observations[agent])
        return observations, {a: {**infos.get(a, {}), "messages": list(self.messages[a])} for a in self.possible_agents}

    def _on_step(self, actions: dict[str, str], result: MultiStepReturn) -> MultiStepReturn:
        observations, rewards, terminations, truncations, infos = result
        for agent, text in actions.items():
            self._add(agent, "assistant", text)
        for agent, text in observations.items():
            self._add(agent, "user", text)
        infos = {a: {**info, "messages": list(self.messages[a])} for a, info in infos.items()}
        return observations, rewards, terminations, truncations, infos


class MultiAgentEpisodeStatistics(MultiAgentWrapper):
    """Adds ``infos[agent]["episode"]`` on the step that ends each agent's part of the episode.

    The dict holds ``return`` (the agent's summed rewards, including those earned while others
    acted), ``length`` (the agent's own actions), ``success`` and ``outcome`` (the final info's
    ``success``, and ``outcome`` when the env reports one: ``"win"``, ``"loss"`` or ``"draw"``)
    and ``elapsed_s``. Running values: ``episode_returns`` and ``episode_lengths``.
    """

    def __init__(self, env: MultiAgentEnv) -> None:
        super().__init__(env)
        self.episode_returns: dict[str, float] = {}
        self.episode_lengths: dict[str, int] = {}
        self._started = time.perf_counter()

    def _on_reset(self, observations: dict[str, str], infos: dict[str, dict[str, Any]]) -> MultiResetReturn:
        self.episode_returns = dict.fromkeys(self.possible_agents, 0.0)
        self.episode_lengths = dict.fromkeys(self.possible_agents, 0)
        self._started = time.perf_counter()
        return observations, infos

    def _on_step(self, actions: dict[str, str], result: MultiStepReturn) -> MultiStepReturn:
        observations, rewards, terminations, truncations, infos = result
        for agent in actions:
            self.episode_lengths[agent] += 1
        infos = dict(infos)
        for agent, reward in rewards.items():
            self.episode_returns[agent] += float(reward)
            if terminations.get(agent) or truncations.get(agent):
                info = infos.get(agent, {})
                infos[agent] = {
                    **info,
                    "episode": {
                        "return": self.episode_returns[agent],
                        "length": self.episode_lengths[agent],
                        "success": bool(info.get("success", False)),
                        "outcome": info.get("outcome"),
                        "elapsed_s": time.perf_counter() - self._started,
                    },
                }
        return observations, rewards, terminations, truncations, infos


class MultiAgentTimeLimit(MultiAgentWrapper):
    """Truncates after an agent's ``max_turns`` actions, or ``max_seconds`` of wall time since ``reset``.

    A game cannot go on without a player, so by default (``scope="all"``) the step on which any
    agent reaches its limit truncates every live agent. ``scope="agent"`` truncates only the agents
    that reached it (for envs whose agents play independent parts). A terminal step stays terminal.

    Args:
        env: The env.
        max_turns: Actions per agent; ``None`` for no turn limit.
        max_seconds: Wall-clock seconds per episode, checked after each step.
        scope: ``"all"`` or ``"agent"``.

    Raises:
        ConfigError: no limit given, a limit not positive, or an unknown scope.
    """

    def __init__(
        self, env: MultiAgentEnv, max_turns: int | None = None, max_seconds: float | None = None, scope: str = "all"
    ) -> None:
        super().__init__(env)
        if max_turns is None and max_seconds is None:
            raise ConfigError("MultiAgentTimeLimit needs max_turns or max_seconds (or both)")
        if max_turns is not None and max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1, got {max_turns}")
        if max_seconds is not None and max_seconds <= 0:
            raise ConfigError(f"max_seconds must be > 0, got {max_seconds}")
        if scope not in ("all", "agent"):
            raise ConfigError(f"scope must be 'all' or 'agent', got {scope!r}")
        self.max_turns, self.max_seconds, self.scope = max_turns, max_seconds, scope
        self._started = time.monotonic()

    def _on_reset(self, observations: dict[str, str], infos: dict[str, dict[str, Any]]) -> MultiResetReturn:
        self._started = time.monotonic()
        return observations, infos

    def _on_step(self, actions: dict[str, str], result: MultiStepReturn) -> MultiStepReturn:
        observations, rewards, terminations, truncations, infos = result
        turns = self.agent_turns  # before this step is counted: add the actors
        for agent in actions:
            turns[agent] += 1
        over_time = self.max_seconds is not None and time.monotonic() - self._started >= self.max_seconds
        reached = [a for a in rewards if self.max_turns is not None and turns.get(a, 0) >= self.max_turns]
        cut = list(rewards) if over_time or (reached and self.scope == "all") else reached
        truncations = dict(truncations)
        for agent in cut:
            if not terminations.get(agent):
                truncations[agent] = True
        return observations, rewards, terminations, truncations, infos
