"""The synchronous vector env: one loop over the sub-envs in the caller's thread."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from gem_core.core import AsyncEnv, Env, to_sync
from gem_core.vector.base import AutoresetMode, Failure, Job, OnError, VectorEnv, VectorStepReturn

__all__ = ["SyncVectorEnv", "drive"]


def drive(job: Job, env: Env) -> Any:
    """Run a job's env calls on a sync env and return the job's result."""
    try:
        op, args = next(job)
        while True:
            value = env.reset(seed=args[0], options=args[1]) if op == "reset" else env.step(args[0])
            op, args = job.send(value)
    except StopIteration as stop:
        return stop.value


class SyncVectorEnv(VectorEnv):
    """Steps the sub-envs one after another in the calling thread.

    The fastest choice for cheap envs: no threads, no copies. Async sub-envs are driven
    through :func:`~gem_core.to_sync`. See :class:`~gem_core.vector.VectorEnv` for
    autoreset, seeding and error handling.

    Args:
        env_fns: One callable per sub-env, each returning an ``Env`` or ``AsyncEnv``.
        autoreset_mode: ``"next_step"`` (default), ``"same_step"`` or ``"disabled"``.
        on_error: ``"raise"`` (default) or ``"reset"``.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Env | AsyncEnv]],
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        on_error: OnError = "raise",
    ) -> None:
        super().__init__(len(env_fns), autoreset_mode, on_error)
        self.envs: list[Env] = []
        try:
            for fn in env_fns:
                self.envs.append(to_sync(fn()))
        except BaseException:
            self._close_envs()
            raise

    def _run_jobs(self, jobs: dict[int, Job]) -> dict[int, Any]:
        outcomes: dict[int, Any] = {}
        for i, job in jobs.items():
            try:
                outcomes[i] = drive(job, self.envs[i])
            except Exception as exc:
                outcomes[i] = Failure(i, exc)
        return outcomes

    def step(self, actions: Sequence[str] | Mapping[int, str]) -> VectorStepReturn:
        # Same semantics as VectorEnv.step; the common case (no autoreset due, episode goes
        # on) skips the job machinery, which is most of the overhead for cheap envs.
        indices, acts = self._prepare_step(actions)
        envs, autoreset = self.envs, self._autoreset
        observations: list[str] = []
        rewards: list[float] = []
        terminated: list[bool] = []
        truncated: list[bool] = []
        infos: list[dict[str, Any]] = []
        failures: dict[int, Failure] = {}
        for i, action in zip(indices, acts, strict=True):
            try:
                if autoreset[i]:
                    result = drive(self._step_job(i, action), envs[i])
                else:
                    result = envs[i].step(action)
                    if result[2] or result[3]:
                        result = drive(self._after_step(i, result), envs[i])
            except Exception as exc:
                failures[i] = Failure(i, exc)
                result = ("", 0.0, False, False, {})
            observations.append(result[0])
            rewards.append(result[1])
            terminated.append(result[2])
            truncated.append(result[3])
            infos.append(result[4])
        if failures:  # rare: the shared path recovers or raises
            outcomes = {
                i: failures.get(i) or (observations[n], rewards[n], terminated[n], truncated[n], infos[n])
                for n, i in enumerate(indices)
            }
            return self._finish_step(indices, outcomes)
        n = len(observations)
        return (
            observations,
            np.fromiter(rewards, np.float64, n),
            np.fromiter(terminated, np.bool_, n),
            np.fromiter(truncated, np.bool_, n),
            infos,
        )

    def _close_envs(self) -> None:
        errors: list[BaseException] = []
        for env in self.envs:
            try:
                env.close()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
