"""A synchronous vector env over multi-agent envs (one episode per sub-env, stepped in order)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gem_core.errors import ConfigError, ResetNeeded, VectorEnvError
from gem_core.multiagent.core import MultiAgentEnv, MultiResetReturn, MultiStepReturn

__all__ = ["SyncMultiAgentVectorEnv"]


class SyncMultiAgentVectorEnv:
    """Steps several multi-agent envs in this thread; each keeps its own agents, turn order and RNGs.

    Sub-env ``i`` is reset with ``seed + i`` on the first ``reset(seed=...)``; later resets without a
    seed (autoreset included) continue each env's own stream, so a run is reproducible.

    Args:
        env_fns: One factory per sub-env.
        autoreset: A sub-env whose episode ended is reset by the next ``step`` that passes ``None``
            for it (Gymnasium's next-step mode); its entry of that call is ``reset``'s result as a
            step with zero rewards and no agent finished. ``False``: ``None`` leaves it as it is.

    Raises:
        ConfigError: no factory, or a factory that builds no multi-agent env.
    """

    def __init__(self, env_fns: Sequence[Callable[[], MultiAgentEnv]], *, autoreset: bool = True) -> None:
        if not env_fns:
            raise ConfigError("SyncMultiAgentVectorEnv needs at least one env factory")
        self.envs: list[MultiAgentEnv] = []
        for i, fn in enumerate(env_fns):
            env = fn()
            if not isinstance(env, MultiAgentEnv):
                raise ConfigError(f"env_fns[{i}] built {type(env).__name__}, not a gem_core.multiagent.MultiAgentEnv")
            self.envs.append(env)
        self.autoreset = autoreset
        self.num_envs = len(self.envs)

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> list[MultiResetReturn]:
        """Reset every sub-env (``seed + i``, or one seed each)."""
        seeds = self._seeds(seed)
        return self._each("reset", lambda i, env: env.reset(seed=seeds[i], options=options))

    def acting_agents(self) -> list[list[str]]:
        """Per sub-env, the agents whose actions its next ``step`` takes (empty: its episode ended)."""
        return [env.acting_agents() for env in self.envs]

    def step(self, actions: Sequence[str | Mapping[str, str] | None]) -> list[MultiStepReturn | None]:
        """Step each sub-env with its action; ``None`` entries reset an ended sub-env (autoreset) or skip it.

        Returns:
            Per sub-env its step result, a reset shaped as a step, or ``None`` when it sat out.

        Raises:
            ConfigError: not one entry per sub-env.
            VectorEnvError: sub-envs raised (``failures`` maps each index to its error, ``results``
                holds the others'); a ``step`` on an ended sub-env raises ``ResetNeeded`` there.
        """
        if len(actions) != self.num_envs:
            raise ConfigError(f"step() got {len(actions)} actions for {self.num_envs} sub-envs; give one per sub-env")

        def one(i: int, env: MultiAgentEnv) -> MultiStepReturn | None:
            action = actions[i]
            if action is None:
                if not (self.autoreset and env.episode_over):
                    return None
                observations, infos = env.reset()
                agents = env.agents
                return (
                    observations,
                    dict.fromkeys(agents, 0.0),
                    dict.fromkeys(agents, False),
                    dict.fromkeys(agents, False),
                    {a: {**infos[a], "autoreset": True} for a in agents},
                )
            return env.step(action)

        return self._each("step", one)

    def close(self) -> None:
        """Close every sub-env; idempotent."""
        for env in self.envs:
            env.close()

    def _seeds(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        if seed is None or isinstance(seed, int):
            return [None if seed is None else seed + i for i in range(self.num_envs)]
        if len(seed) != self.num_envs:
            raise ConfigError(f"reset() got {len(seed)} seeds for {self.num_envs} sub-envs")
        return list(seed)

    def _each(self, phase: str, call: Callable[[int, MultiAgentEnv], Any]) -> list[Any]:
        results: list[Any] = []
        failures: dict[int, BaseException] = {}
        for i, env in enumerate(self.envs):
            try:
                results.append(call(i, env))
            except Exception as exc:
                failures[i] = exc
                results.append(None)
        if failures:
            lines = "; ".join(f"env {i} ({self.envs[i]!r}): {type(e).__name__}: {e}" for i, e in failures.items())
            hint = (
                " (an ended sub-env takes None, which resets it)"
                if any(isinstance(e, ResetNeeded) for e in failures.values())
                else ""
            )
            raise VectorEnvError(f"{phase} failed in {len(failures)} sub-env(s){hint}: {lines}", failures, results)
        return results
