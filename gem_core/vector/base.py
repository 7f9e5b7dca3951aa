"""What every vector env shares: autoreset modes, per-episode seeds, error isolation.

A vector env runs ``num_envs`` text envs side by side. The per-env logic (autoreset,
seeding, recovery after an error) is written once as a *job*: a generator that yields
the env calls it needs (``("reset", (seed, options))`` or ``("step", (action,))``) and
returns the entry of the batch. Each vector class only decides how to run the calls
(a plain loop, or concurrently on an event loop, in threads or in processes).
"""

from __future__ import annotations

import abc
import asyncio
import enum
import itertools
import traceback
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from gem_core.core import ResetReturn, StepReturn
from gem_core.errors import ConfigError, ResetNeeded, VectorEnvError

__all__ = [
    "AutoresetMode",
    "Failure",
    "Job",
    "OnError",
    "VectorEnv",
    "VectorResetReturn",
    "VectorStepReturn",
    "episode_seed",
    "episode_seeds",
]

#: ``(observations, infos)``, one entry per reset env.
VectorResetReturn = tuple[list[str], list[dict[str, Any]]]
#: ``(observations, rewards, terminated, truncated, infos)``; arrays are numpy (float64, bool).
VectorStepReturn = tuple[list[str], np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]
#: An env call a job asks for: ``("reset", (seed, options))`` or ``("step", (action,))``.
Call = tuple[str, tuple[Any, ...]]
#: Per-env logic, driven by the vector class (see the module docstring).
Job = Generator[Call, Any, Any]
OnError = Literal["raise", "reset"]


class AutoresetMode(enum.Enum):
    """What ``step`` does with an env whose episode just ended (Gymnasium's three modes).

    * ``NEXT_STEP``: the step that ends an episode returns its final observation and info
      as usual; the *next* ``step`` of that env ignores its action, resets the env and
      returns ``(first_obs, 0.0, False, False, reset_info)``.
    * ``SAME_STEP``: the env is reset within the step that ended it. That step returns the
      new episode's first observation with the final step's reward and flags, and an info
      that is the reset info plus ``final_obs`` and ``final_info`` of the finished episode.
    * ``DISABLED``: nothing is reset; stepping a finished env raises
      :class:`~gem_core.errors.ResetNeeded` until ``reset(indices=[i])``.
    """

    NEXT_STEP = "next_step"
    SAME_STEP = "same_step"
    DISABLED = "disabled"

    @classmethod
    def parse(cls, value: AutoresetMode | str) -> AutoresetMode:
        """Accept the enum, its value, or Gymnasium's spelling (``"NextStep"``)."""
        if isinstance(value, cls):
            return value
        key = str(value).replace("_", "").replace("-", "").lower()
        for mode in cls:
            if mode.value.replace("_", "") == key:
                return mode
        raise ConfigError(f"unknown autoreset_mode {value!r}; choose one of {[m.value for m in cls]}")


# Seeds are derived in blocks: one SeedSequence per (root, env, block) yields the seeds of
# _SEED_BLOCK consecutive episodes, because building a SeedSequence costs far more than a step.
_SEED_BLOCK = 64


def episode_seed(root: int, env_index: int, episode: int) -> int:
    """The seed of env ``env_index``'s ``episode``-th episode (0-based) in a run seeded with ``root``.

    Derived with numpy ``SeedSequence`` spawning: ``SeedSequence(root, spawn_key=(env_index,
    episode // 64))`` generates the seeds of 64 consecutive episodes. The result depends
    only on ``(root, env_index, episode)``, so a whole vector run, autoresets included,
    replays from ``root``.
    """
    return _SeedBlock(root, env_index, episode // _SEED_BLOCK).seeds[episode % _SEED_BLOCK]


def episode_seeds(root: int, env_index: int) -> Iterator[int]:
    """All of env ``env_index``'s episode seeds in order: ``episode_seed(root, env_index, k)`` for k = 0, 1, ...

    Cheaper than calling :func:`episode_seed` per episode: each block of 64 seeds is derived once.
    """
    for block in itertools.count():
        yield from _SeedBlock(root, env_index, block).seeds


class _SeedBlock:
    __slots__ = ("block", "seeds")

    def __init__(self, root: int, env_index: int, block: int) -> None:
        words = np.random.SeedSequence(root, spawn_key=(env_index, block)).generate_state(_SEED_BLOCK, np.uint64)
        # 63 bits: a non-negative int that every seed consumer accepts
        self.seeds: list[int] = [int(w) >> 1 for w in words]
        self.block = block


class Failure:
    """A sub-env call that raised: the env index and the exception."""

    __slots__ = ("error", "index")

    def __init__(self, index: int, error: BaseException) -> None:
        self.index = index
        self.error = error

    def describe(self) -> dict[str, Any]:
        """A plain dict for ``info["env_error"]``: index, type, message, traceback."""
        return {
            "index": self.index,
            "type": type(self.error).__name__,
            "message": str(self.error),
            "traceback": "".join(traceback.format_exception(type(self.error), self.error, self.error.__traceback__)),
        }


class VectorEnv(abc.ABC):
    """``num_envs`` text envs stepped as one batch.

    Args:
        num_envs: Number of sub-envs.
        autoreset_mode: See :class:`AutoresetMode`; published in ``metadata["autoreset_mode"]``.
        on_error: What to do when a sub-env raises. ``"raise"``: finish the other envs' calls,
            then raise :class:`~gem_core.errors.VectorEnvError` naming each failed index and
            its cause, with the other envs' results on ``error.results``; a failed env must be
            reset (``reset(indices=[i])``) before it is stepped again. ``"reset"``: reset the
            failed env (next seed of its sequence) and carry on: its entry is the new first
            observation, reward ``0.0``, ``terminated=False``, ``truncated=True`` and
            ``info["env_error"]`` (index, type, message, traceback).

    Seeding: ``reset(seed=s)`` makes ``s`` the run's root seed; env ``i``'s ``k``-th episode
    (explicit reset or autoreset) gets :func:`episode_seed` ``(s, i, k)``. ``reset()`` without
    a seed before any seeded reset draws a root from OS entropy and keeps it in
    :attr:`root_seed`, so any run can be replayed.
    """

    #: ``{"autoreset_mode": AutoresetMode}``, as in Gymnasium.
    metadata: dict[str, Any]

    def __init__(self, num_envs: int, autoreset_mode: AutoresetMode | str, on_error: OnError) -> None:
        if num_envs < 1:
            raise ConfigError(f"num_envs must be >= 1, got {num_envs}")
        if on_error not in ("raise", "reset"):
            raise ConfigError(f"on_error must be 'raise' or 'reset', got {on_error!r}")
        self.num_envs = num_envs
        self.autoreset_mode = AutoresetMode.parse(autoreset_mode)
        self.on_error: OnError = on_error
        self.metadata = {"autoreset_mode": self.autoreset_mode}
        self.root_seed: int | None = None
        self.closed = False
        self._episodes = [0] * num_envs  # episodes started per env, for seeds
        self._seed_blocks: list[_SeedBlock | None] = [None] * num_envs
        self._all_indices = list(range(num_envs))  # shared, never mutated
        self._autoreset = [False] * num_envs  # NEXT_STEP: ended on its last step
        # envs that step() refuses until they are reset, with the reason (one dict lookup per step)
        self._blocked: dict[int, str] = dict.fromkeys(range(num_envs), "was never reset")

    # ------------------------------------------------------------------ subclass API
    @abc.abstractmethod
    def _run_jobs(self, jobs: dict[int, Job]) -> dict[int, Any]:
        """Run each env's job to completion; a job that raised maps to a :class:`Failure`."""

    @abc.abstractmethod
    def _close_envs(self) -> None:
        """Close the sub-envs and release threads and processes."""

    # ------------------------------------------------------------------ public API
    def reset(
        self,
        *,
        seed: int | None = None,
        options: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
        indices: Sequence[int] | None = None,
    ) -> VectorResetReturn:
        """Start new episodes in all envs, or in ``indices`` only.

        Args:
            seed: Root seed of the run (resets every env's episode counter); only with a full reset.
            options: One dict for every env, or one entry per reset env.
            indices: Reset only these envs; their results come back in this order.

        Returns:
            ``(observations, infos)`` for the reset envs.

        Raises:
            VectorEnvError: some envs raised; the others are reset, see ``error.results``.
        """
        targets, per_env = self._prepare_reset(seed, options, indices)
        outcomes = self._run_jobs({i: self._reset_job(i, per_env[n]) for n, i in enumerate(targets)})
        return self._finish_reset(targets, outcomes)

    def step(self, actions: Sequence[str] | Mapping[int, str]) -> VectorStepReturn:
        """Step every env with ``actions[i]``, or, given a mapping ``{index: action}``, only those envs.

        Returns:
            ``(observations, rewards, terminated, truncated, infos)`` for the stepped envs, in
            the order of ``actions`` (so a mapping's results follow its key order).

        Raises:
            ResetNeeded: an env was never reset, raised earlier, or finished with autoreset disabled.
            VectorEnvError: some envs raised (with ``on_error="raise"``); see the class docstring.
        """
        indices, acts = self._prepare_step(actions)
        outcomes = self._run_jobs({i: self._step_job(i, a) for i, a in zip(indices, acts, strict=True)})
        return self._finish_step(indices, outcomes)

    async def areset(
        self,
        *,
        seed: int | None = None,
        options: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
        indices: Sequence[int] | None = None,
    ) -> VectorResetReturn:
        """:meth:`reset` for callers inside an event loop (does not block the loop)."""
        targets, per_env = self._prepare_reset(seed, options, indices)
        outcomes = await self._arun_jobs({i: self._reset_job(i, per_env[n]) for n, i in enumerate(targets)})
        return self._finish_reset(targets, outcomes)

    async def astep(self, actions: Sequence[str] | Mapping[int, str]) -> VectorStepReturn:
        """:meth:`step` for callers inside an event loop (does not block the loop)."""
        indices, acts = self._prepare_step(actions)
        outcomes = await self._arun_jobs({i: self._step_job(i, a) for i, a in zip(indices, acts, strict=True)})
        return self._finish_step(indices, outcomes)

    async def _arun_jobs(self, jobs: dict[int, Job]) -> dict[int, Any]:
        """:meth:`_run_jobs` without blocking the caller's loop; a thread by default."""
        return await asyncio.to_thread(self._run_jobs, jobs)

    def close(self) -> None:
        """Close every sub-env and release threads, processes and their children; idempotent."""
        if self.closed:
            return
        self.closed = True
        self._close_envs()

    def __enter__(self) -> VectorEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def needs_reset(self) -> list[bool]:
        """Per env: whether ``step`` would refuse it (never reset, failed, or finished with autoreset off)."""
        return [i in self._blocked for i in range(self.num_envs)]

    # ------------------------------------------------------------------ jobs
    def _take_seed(self, i: int) -> int:
        assert self.root_seed is not None
        k = self._episodes[i]
        self._episodes[i] = k + 1
        block = self._seed_blocks[i]
        if block is None or block.block != k // _SEED_BLOCK:
            block = self._seed_blocks[i] = _SeedBlock(self.root_seed, i, k // _SEED_BLOCK)
        return block.seeds[k % _SEED_BLOCK]

    def _reset_job(self, i: int, options: dict[str, Any] | None) -> Job:
        result: ResetReturn = yield ("reset", (self._take_seed(i), options))
        return result

    def _step_job(self, i: int, action: str) -> Job:
        if self._autoreset[i]:
            self._autoreset[i] = False
            obs, info = yield from self._reset_job(i, None)
            return obs, 0.0, False, False, info
        result: StepReturn = yield ("step", (action,))
        return (yield from self._after_step(i, result))

    def _after_step(self, i: int, result: StepReturn) -> Job:
        obs, reward, terminated, truncated, info = result
        if terminated or truncated:
            mode = self.autoreset_mode
            if mode is AutoresetMode.SAME_STEP:
                new_obs, new_info = yield from self._reset_job(i, None)
                return new_obs, reward, terminated, truncated, {**new_info, "final_obs": obs, "final_info": info}
            if mode is AutoresetMode.NEXT_STEP:
                self._autoreset[i] = True
            else:
                self._blocked[i] = "finished its episode and autoreset is disabled"
        return result

    def _recover_job(self, failure: Failure) -> Job:
        i = failure.index
        self._autoreset[i] = False
        self._blocked.pop(i, None)
        obs, info = yield from self._reset_job(i, None)
        return obs, 0.0, False, True, {**info, "env_error": failure.describe()}

    # ------------------------------------------------------------------ batching
    def _prepare_reset(
        self,
        seed: int | None,
        options: dict[str, Any] | Sequence[dict[str, Any] | None] | None,
        indices: Sequence[int] | None,
    ) -> tuple[list[int], list[dict[str, Any] | None]]:
        self._check_open()
        if indices is not None and seed is not None:
            raise ValueError(
                "reset(seed=..., indices=...): a seed restarts the whole run; reset all envs with the seed, "
                "then reset single envs without one (they continue their seed sequences)"
            )
        targets = list(range(self.num_envs)) if indices is None else [self._check_index(i) for i in indices]
        if options is None or isinstance(options, Mapping):
            per_env: list[dict[str, Any] | None] = [options] * len(targets)
        else:
            per_env = list(options)
            if len(per_env) != len(targets):
                raise ValueError(f"got {len(per_env)} options for {len(targets)} envs being reset")
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
                raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
            self.root_seed = int(seed)
            self._episodes = [0] * self.num_envs
            self._seed_blocks = [None] * self.num_envs
        elif self.root_seed is None:
            self.root_seed = int(np.random.SeedSequence().entropy)  # type: ignore[arg-type]
        for i in targets:
            self._autoreset[i] = False
        return targets, per_env

    def _finish_reset(self, targets: list[int], outcomes: dict[int, Any]) -> VectorResetReturn:
        observations: list[str] = []
        infos: list[dict[str, Any]] = []
        failures: dict[int, BaseException] = {}
        for i in targets:
            out = outcomes[i]
            if isinstance(out, Failure):
                self._blocked[i] = "raised an error"
                failures[i] = out.error
                observations.append("")
                infos.append({"env_error": out.describe()})
                continue
            self._blocked.pop(i, None)
            observations.append(out[0])
            infos.append(out[1])
        if failures:
            raise self._error("reset", failures, (observations, infos))
        return observations, infos

    def _prepare_step(self, actions: Sequence[str] | Mapping[int, str]) -> tuple[list[int], Sequence[str]]:
        if self.closed:
            raise RuntimeError(f"{type(self).__name__} is closed")
        acts: Sequence[str]
        if type(actions) is list or type(actions) is tuple:  # the common case, without ABC isinstance checks
            acts, indices = actions, self._all_indices
        elif isinstance(actions, str):
            raise TypeError("step() takes one action per env (a sequence or {index: action}), got a single str")
        elif isinstance(actions, Mapping):
            indices = [self._check_index(i) for i in actions]
            acts = list(actions.values())
        else:
            acts, indices = list(actions), self._all_indices
        if indices is self._all_indices and len(acts) != self.num_envs:
            raise ValueError(
                f"got {len(acts)} actions for {self.num_envs} envs; pass {{index: action}} to step a subset"
            )
        if self._blocked and not self._blocked.keys().isdisjoint(indices):
            i = next(i for i in indices if i in self._blocked)
            raise ResetNeeded(f"env {i} {self._blocked[i]}: call reset(indices=[{i}]) (or reset()) before stepping it")
        return indices, acts

    def _finish_step(self, indices: list[int], outcomes: dict[int, Any]) -> VectorStepReturn:
        failed = [outcomes[i] for i in indices if isinstance(outcomes[i], Failure)]
        if failed and self.on_error == "reset":
            recovered = self._run_jobs({f.index: self._recover_job(f) for f in failed})
            outcomes = {**outcomes, **recovered}
        observations: list[str] = []
        rewards: list[float] = []
        terminated: list[bool] = []
        truncated: list[bool] = []
        infos: list[dict[str, Any]] = []
        failures: dict[int, BaseException] = {}
        for i in indices:
            out = outcomes[i]
            if isinstance(out, Failure):
                self._blocked[i] = "raised an error"
                failures[i] = out.error
                out = ("", 0.0, False, False, {"env_error": out.describe()})
            observations.append(out[0])
            rewards.append(out[1])
            terminated.append(out[2])
            truncated.append(out[3])
            infos.append(out[4])
        result = (
            observations,
            np.array(rewards, dtype=np.float64),
            np.array(terminated, dtype=np.bool_),
            np.array(truncated, dtype=np.bool_),
            infos,
        )
        if failures:
            raise self._error("step", failures, result)
        return result

    def _error(self, what: str, failures: dict[int, BaseException], results: object) -> VectorEnvError:
        causes = "; ".join(f"env {i}: {type(e).__name__}: {e}" for i, e in sorted(failures.items()))
        return VectorEnvError(
            f"{type(self).__name__}.{what}() failed in {len(failures)} of {self.num_envs} envs ({causes}). "
            f"The other envs kept their state; reset the failed ones with reset(indices={sorted(failures)}) "
            "or build the vector env with on_error='reset'",
            failures,
            results,
        )

    def _check_index(self, i: int) -> int:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < self.num_envs:
            raise IndexError(f"env index {i!r} out of range for {self.num_envs} envs")
        return int(i)

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} num_envs={self.num_envs} autoreset_mode={self.autoreset_mode.value}>"
