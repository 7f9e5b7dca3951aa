r"""What every vector env shares: the batch API, seeding, error reporting, and the backend seam.

A vector env runs ``num_envs`` text envs side by side. The per-env logic (autoreset,
seeds, recovery after an error) lives in :class:`~gem_core.vector.member.Member`, which
serves typed requests (:class:`~gem_core.vector.member.Step`,
:class:`~gem_core.vector.member.Reset`). The sub-envs are split into :class:`Group`\\ s,
each hosting its members one way (in the caller's thread, on an event loop, in threads,
in worker processes, in Ray actors). :class:`VectorEnv` sends every group its requests at
once, then collects the outcomes, so groups work concurrently.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from gem_core.errors import ConfigError, ResetNeeded, VectorEnvError
from gem_core.seed_streams import episode_seed, episode_seeds, fresh_root_seed
from gem_core.vector.member import AsyncMember, AutoresetMode, Failure, Member, OnError, Outcome, Request, Reset, Step

__all__ = [
    "AutoresetMode",
    "Failure",
    "Group",
    "LocalGroup",
    "OnError",
    "Pending",
    "VectorEnv",
    "VectorResetReturn",
    "VectorStepReturn",
    "check_timeout",
    "episode_seed",  # re-exported: it moved to gem_core.seed_streams
    "episode_seeds",
]

logger = logging.getLogger("gem_core.vector")

#: ``(observations, infos)``, one entry per reset env.
VectorResetReturn = tuple[list[str], list[dict[str, Any]]]
#: ``(observations, rewards, terminated, truncated, infos)``; arrays are numpy (float64, bool).
VectorStepReturn = tuple[list[str], np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]
_M = TypeVar("_M", Member, AsyncMember)
#: Collects a group's outcomes, in the order of the indices it was started with.
Pending = Callable[[], list[Outcome]]


def check_timeout(name: str, value: float | None) -> None:
    """Raise :class:`ConfigError` unless ``value`` is ``None`` or a positive number of seconds."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
        raise ConfigError(f"{name} must be a positive number of seconds or None, got {value!r}")


class Group(abc.ABC):
    """Some sub-envs of a vector env, hosted one way (a backend).

    Attributes:
        indices: The env indices this group hosts.
        kind: How it runs them, for :attr:`AsyncVectorEnv.member_kinds`.
    """

    kind: str = "?"

    def __init__(self, indices: Sequence[int]) -> None:
        self.indices = list(indices)

    @abc.abstractmethod
    def start(self, indices: list[int], requests: Sequence[Request]) -> Pending:
        """Start serving one request per index; the returned callable waits for the outcomes."""

    def start_steps(self, indices: list[int], actions: Sequence[str]) -> Pending:
        """:meth:`start` with one :class:`Step` per action (groups override it to skip building requests)."""
        return self.start(indices, [Step(a) for a in actions])

    @abc.abstractmethod
    def close(self) -> list[BaseException]:
        """Close the envs and release threads, processes or actors; returns the envs' close errors, never raises."""


class LocalGroup(Group, Generic[_M]):
    """Members living in this process, keyed by env index."""

    def __init__(self, members: Sequence[_M]) -> None:
        super().__init__([m.index for m in members])
        self.members: dict[int, _M] = {m.index: m for m in members}


class VectorEnv:
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
            ``info["env_error"]`` (index, type, message, traceback). A failed ``reset`` always raises.

    Seeding: ``reset(seed=s)`` makes ``s`` the run's root seed; env ``i``'s ``k``-th episode
    (explicit reset or autoreset) gets :func:`~gem_core.seed_streams.episode_seed` ``(s, i, k)``.
    ``reset()`` without a seed before any seeded reset draws a root from OS entropy and
    keeps it in :attr:`root_seed`, so any run can be replayed.

    Subclasses build the members and call :meth:`_set_groups`.
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
        #: Exceptions the sub-envs raised in ``close()`` (logged; ``close()`` itself never raises).
        self.close_errors: list[BaseException] = []
        self._groups: list[Group] = []
        self._group_of: list[Group] = []
        self._all_indices = list(range(num_envs))  # shared, never mutated
        # envs that step() refuses until they are reset, with the reason (one dict lookup per step)
        self._blocked: dict[int, str] = dict.fromkeys(range(num_envs), "was never reset")

    def _set_groups(self, groups: Sequence[Group]) -> None:
        self._groups = [g for g in groups if g.indices]
        owner: dict[int, Group] = {i: g for g in self._groups for i in g.indices}
        self._group_of = [owner[i] for i in range(self.num_envs)]

    # ------------------------------------------------------------------ dispatch
    def _run(
        self, indices: list[int], requests: Sequence[Request] | None, actions: Sequence[str] | None
    ) -> list[Outcome]:
        """Serve one request per index (``actions`` stand for ``Step`` requests); outcomes follow ``indices``."""
        if len(self._groups) == 1:
            group = self._groups[0]
            return group.start_steps(indices, actions)() if requests is None else group.start(indices, requests)()  # type: ignore[arg-type]
        items = actions if requests is None else requests
        assert items is not None
        split: dict[int, tuple[Group, list[int], list[int], list[Any]]] = {}
        for n, (i, item) in enumerate(zip(indices, items, strict=True)):
            group = self._group_of[i]
            entry = split.get(id(group))
            if entry is None:
                entry = split[id(group)] = (group, [], [], [])
            entry[1].append(n)
            entry[2].append(i)
            entry[3].append(item)
        pending = [
            (positions, group.start_steps(idx, its) if requests is None else group.start(idx, its))
            for group, positions, idx, its in split.values()
        ]
        outcomes: list[Outcome] = [()] * len(indices)
        for positions, wait in pending:
            for n, out in zip(positions, wait(), strict=True):
                outcomes[n] = out
        return outcomes

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
        targets, requests = self._prepare_reset(seed, options, indices)
        return self._finish_reset(targets, self._run(targets, requests, None))

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
        return self._finish_step(indices, self._run(indices, None, acts))

    async def areset(
        self,
        *,
        seed: int | None = None,
        options: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
        indices: Sequence[int] | None = None,
    ) -> VectorResetReturn:
        """:meth:`reset` for callers inside an event loop (does not block the loop)."""
        targets, requests = self._prepare_reset(seed, options, indices)
        outcomes = await asyncio.to_thread(self._run, targets, requests, None)
        return self._finish_reset(targets, outcomes)

    async def astep(self, actions: Sequence[str] | Mapping[int, str]) -> VectorStepReturn:
        """:meth:`step` for callers inside an event loop (does not block the loop)."""
        indices, acts = self._prepare_step(actions)
        outcomes = await asyncio.to_thread(self._run, indices, None, acts)
        return self._finish_step(indices, outcomes)

    def close(self) -> None:
        """Close every sub-env and release threads, processes, actors and their children; idempotent.

        Never raises: exceptions from the sub-envs' own ``close()`` are logged and kept in
        :attr:`close_errors`.
        """
        if self.closed:
            return
        self.closed = True
        for group in self._groups:
            try:
                self.close_errors += group.close()
            except Exception as exc:  # a backend bug must not leave the other groups open
                self.close_errors.append(exc)
        for error in self.close_errors:
            logger.warning(
                "%s.close(): a sub-env's close raised %s: %s", type(self).__name__, type(error).__name__, error
            )

    def __enter__(self) -> VectorEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def needs_reset(self) -> list[bool]:
        """Per env: whether ``step`` would refuse it (never reset, failed, or finished with autoreset off)."""
        return [i in self._blocked for i in range(self.num_envs)]

    # ------------------------------------------------------------------ batching
    def _prepare_reset(
        self,
        seed: int | None,
        options: dict[str, Any] | Sequence[dict[str, Any] | None] | None,
        indices: Sequence[int] | None,
    ) -> tuple[list[int], list[Request]]:
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
        elif self.root_seed is None:
            self.root_seed = fresh_root_seed()
        root, restart = self.root_seed, seed is not None
        return targets, [Reset(root, restart, opts) for opts in per_env]

    def _finish_reset(self, targets: list[int], outcomes: list[Outcome]) -> VectorResetReturn:
        observations: list[str] = []
        infos: list[dict[str, Any]] = []
        failures: dict[int, Failure] = {}
        for i, out in zip(targets, outcomes, strict=True):
            if isinstance(out, Failure):
                self._blocked[i] = "raised an error"
                failures[i] = out
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

    def _finish_step(self, indices: list[int], outcomes: list[Outcome]) -> VectorStepReturn:
        if len(outcomes) == 1 and self.autoreset_mode is not AutoresetMode.DISABLED:
            out = outcomes[0]  # one env: no transposing (the arrays are most of a cheap env's step)
            if not isinstance(out, Failure):
                return (
                    [out[0]],
                    np.fromiter((out[1],), np.float64, 1),
                    np.fromiter((out[2],), np.bool_, 1),
                    np.fromiter((out[3],), np.bool_, 1),
                    [out[4]],
                )
        failures: dict[int, Failure] = {}
        if Failure in map(type, outcomes):  # rare; the common case below transposes in C
            entries: list[Outcome] = []
            for i, out in zip(indices, outcomes, strict=True):
                if type(out) is Failure:
                    self._blocked[i] = "raised an error"
                    failures[i] = out
                    out = ("", 0.0, False, False, {"env_error": out.describe()})
                entries.append(out)
            outcomes = entries
        n = len(outcomes)
        observations, rewards, terminated, truncated, infos = zip(*outcomes, strict=True) if n else ((), (), (), (), ())
        term = np.fromiter(terminated, np.bool_, n)
        trunc = np.fromiter(truncated, np.bool_, n)
        if self.autoreset_mode is AutoresetMode.DISABLED:
            for i, t, u in zip(indices, terminated, truncated, strict=True):
                if t or u:
                    self._blocked[i] = "finished its episode and autoreset is disabled"
        result = (list(observations), np.fromiter(rewards, np.float64, n), term, trunc, list(infos))
        if failures:
            raise self._error("step", failures, result)
        return result

    def _error(self, what: str, failures: dict[int, Failure], results: object) -> VectorEnvError:
        causes = "; ".join(
            f"env {i}: {type(f.error).__name__}: {f.error}" + ("" if f.where() in str(f.error) else f" [{f.where()}]")
            for i, f in sorted(failures.items())
        )
        return VectorEnvError(
            f"{type(self).__name__}.{what}() failed in {len(failures)} of {self.num_envs} envs ({causes}). "
            f"The other envs kept their state; reset the failed ones with reset(indices={sorted(failures)}) "
            "or build the vector env with on_error='reset'",
            {i: f.error for i, f in failures.items()},
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
