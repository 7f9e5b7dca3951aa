"""Our multi-agent envs as PettingZoo envs (``pip install pettingzoo``; never a gem-core dependency).

:func:`to_pettingzoo_aec` gives a turn-based env PettingZoo's ``AECEnv`` API (``agent_iter``,
``last``, ``observe``, the "dead step" with ``None`` for a finished agent) and
:func:`to_pettingzoo_parallel` gives a simultaneous-move env its ``ParallelEnv`` API. Observations
and actions are text: both spaces are ``gymnasium.spaces.Text`` over printable ASCII (``charset``).
"""

from __future__ import annotations

import string
from typing import Any

from gem_core.errors import ConfigError
from gem_core.multiagent.core import MultiAgentEnv

__all__ = ["TEXT_CHARSET", "TextObservation", "to_pettingzoo_aec", "to_pettingzoo_parallel"]

#: The characters of the Text spaces: printable ASCII (letters, digits, punctuation, whitespace).
TEXT_CHARSET = string.printable


class TextObservation(str):
    """A text observation that also carries a ``dtype`` (the Text space's), which PettingZoo's tests read."""

    __slots__ = ()

    @property
    def dtype(self) -> Any:
        import numpy as np

        return np.dtype(str)


def _spaces(env: MultiAgentEnv, max_length: int) -> tuple[dict[str, Any], dict[str, Any]]:
    from gymnasium.spaces import Text

    obs = {a: Text(max_length=max_length, min_length=0, charset=TEXT_CHARSET) for a in env.possible_agents}
    act = {a: Text(max_length=min(max_length, 256), min_length=0, charset=TEXT_CHARSET) for a in env.possible_agents}
    return obs, act


def to_pettingzoo_aec(env: MultiAgentEnv, *, max_length: int = 1 << 16) -> Any:
    """A PettingZoo ``AECEnv`` over a turn-based env.

    Args:
        env: A turn-based :class:`~gem_core.multiagent.MultiAgentEnv`.
        max_length: Longest observation text of the observation spaces.

    Raises:
        ConfigError: ``env`` moves its agents at once (use :func:`to_pettingzoo_parallel`).
    """
    from pettingzoo import AECEnv

    if env.parallel:
        raise ConfigError(f"{env!r} moves every agent at once: use to_pettingzoo_parallel")

    class TextAEC(AECEnv):  # type: ignore[misc]
        metadata = {"name": f"gem_{type(env.unwrapped).__name__}", "is_parallelizable": False}

        def __init__(self) -> None:
            super().__init__()
            self.env = env
            self.possible_agents = list(env.possible_agents)
            self._obs_spaces, self._act_spaces = _spaces(env, max_length)
            self._latest: dict[str, str] = {}

        def observation_space(self, agent: str) -> Any:
            return self._obs_spaces[agent]

        def action_space(self, agent: str) -> Any:
            return self._act_spaces[agent]

        def observe(self, agent: str) -> str:
            return TextObservation(self._latest.get(agent, ""))

        def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
            observations, infos = self.env.reset(seed=seed, options=options)
            self._latest = dict(observations)
            self.agents = list(self.env.agents)
            self.rewards = dict.fromkeys(self.agents, 0.0)
            self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
            self.terminations = dict.fromkeys(self.agents, False)
            self.truncations = dict.fromkeys(self.agents, False)
            self.infos = {a: infos[a] for a in self.agents}
            self.agent_selection = self.env.agent_selection

        def step(self, action: str | None) -> None:
            agent = self.agent_selection
            if self.terminations[agent] or self.truncations[agent]:
                self._was_dead_step(action)
                return
            self._cumulative_rewards[agent] = 0.0
            observations, rewards, terminations, truncations, infos = self.env.step({agent: str(action)})
            self._latest.update(observations)
            for a in self.agents:
                self.rewards[a] = rewards.get(a, 0.0)
                self.terminations[a] = terminations.get(a, self.terminations[a])
                self.truncations[a] = truncations.get(a, self.truncations[a])
                self.infos[a] = infos.get(a, self.infos[a])
            self._accumulate_rewards()
            if not self.env.episode_over:
                self.agent_selection = self.env.agent_selection
            self._deads_step_first()

        def render(self) -> str:
            return "\n".join(f"{a}: {self._latest.get(a, '')}" for a in self.possible_agents)

        def close(self) -> None:
            self.env.close()

    return TextAEC()


def to_pettingzoo_parallel(env: MultiAgentEnv, *, max_length: int = 1 << 16) -> Any:
    """A PettingZoo ``ParallelEnv`` over a simultaneous-move env.

    Raises:
        ConfigError: ``env`` is turn-based (use :func:`to_pettingzoo_aec`).
    """
    from pettingzoo import ParallelEnv

    if not env.parallel:
        raise ConfigError(f"{env!r} is turn-based: use to_pettingzoo_aec")

    class TextParallel(ParallelEnv):  # type: ignore[misc]
        metadata = {"name": f"gem_{type(env.unwrapped).__name__}"}

        def __init__(self) -> None:
            self.env = env
            self.possible_agents = list(env.possible_agents)
            self.agents: list[str] = []
            self._obs_spaces, self._act_spaces = _spaces(env, max_length)

        def observation_space(self, agent: str) -> Any:
            return self._obs_spaces[agent]

        def action_space(self, agent: str) -> Any:
            return self._act_spaces[agent]

        def reset(
            self, seed: int | None = None, options: dict[str, Any] | None = None
        ) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
            observations, infos = self.env.reset(seed=seed, options=options)
            self.agents = list(self.env.agents)
            return {a: TextObservation(t) for a, t in observations.items()}, infos

        def step(self, actions: dict[str, str]) -> Any:
            observations, rewards, terminations, truncations, infos = self.env.step(
                {a: str(t) for a, t in actions.items()}
            )
            # PettingZoo's parallel API reports an observation for every agent of the step
            observations = {a: TextObservation(observations.get(a, "")) for a in rewards}
            self.agents = list(self.env.agents)
            return observations, rewards, terminations, truncations, infos

        def render(self) -> None:
            return None

        def close(self) -> None:
            self.env.close()

    return TextParallel()
