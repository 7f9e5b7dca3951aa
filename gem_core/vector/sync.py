"""The synchronous backend: a loop over the sub-envs in the caller's thread."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from gem_core.core import AsyncEnv, Env, to_sync
from gem_core.errors import EnvStepTimeout
from gem_core.vector.base import LocalGroup, Pending, VectorEnv, VectorStepReturn, check_timeout
from gem_core.vector.member import AutoresetMode, Member, OnError, Outcome, Request

__all__ = ["InlineGroup", "SyncVectorEnv", "close_all"]

_ONE_REWARD = np.zeros(1, np.float64)
_ONE_FLAG = np.zeros(1, np.bool_)


def close_all(envs: Sequence[Env]) -> list[BaseException]:
    """Close every env, collecting (not raising) their errors."""
    errors: list[BaseException] = []
    for env in envs:
        try:
            env.close()
        except Exception as exc:
            errors.append(exc)
    return errors


class InlineGroup(LocalGroup[Member]):
    """Members served one after another in the calling thread.

    With a ``timeout``, each member's request runs under a ``SIGALRM`` timer: an env still
    running Python code when it rings gets :class:`~gem_core.errors.EnvStepTimeout` raised
    inside it (``on_error`` applies; the env object is kept and reset). Only in the main
    thread, on Unix; elsewhere the timeout is not enforced. A call blocked in C code that
    does not return to Python is interrupted only when it does.
    """

    kind = "inline"

    def __init__(self, members: Sequence[Member], timeout: float | None = None) -> None:
        super().__init__(members)
        self.timeout = timeout

    def start(self, indices: list[int], requests: Sequence[Request]) -> Pending:
        members = self.members
        if self.timeout is not None:
            outcomes = self._timed([(members[i].handle, members[i], r) for i, r in zip(indices, requests, strict=True)])
            return lambda: outcomes
        outcomes = [members[i].handle(r) for i, r in zip(indices, requests, strict=True)]
        return lambda: outcomes

    def start_steps(self, indices: list[int], actions: Sequence[str]) -> Pending:
        members = self.members
        if self.timeout is not None:
            outcomes = self._timed([(members[i].step, members[i], a) for i, a in zip(indices, actions, strict=True)])
            return lambda: outcomes
        stepped: list[Outcome] = [members[i].step(a) for i, a in zip(indices, actions, strict=True)]
        return lambda: stepped

    def _timed(self, calls: list[tuple[Callable[[Any], Outcome], Member, Any]]) -> list[Outcome]:
        assert self.timeout is not None
        outcomes: list[Outcome] = []
        with alarm(self.timeout) as arm:
            for call, member, arg in calls:
                try:
                    with arm(member):
                        outcomes.append(call(arg))
                except EnvStepTimeout as exc:  # rang between the env's calls, outside the member's guard
                    outcomes.append(member.failure(exc, ""))
        return outcomes

    def close(self) -> list[BaseException]:
        return close_all([m.env for m in self.members.values()])


@contextmanager
def alarm(seconds: float) -> Iterator[Callable[[Member], Any]]:
    """A ``SIGALRM`` deadline per member call, as in ``with arm(member): member.step(action)``.

    A no-op off the main thread or without ``signal.setitimer``.
    """
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    current: list[Member] = []

    def ring(signum: int, frame: Any) -> None:
        raise current[-1].timeout_error(seconds, " (interrupted by SIGALRM)")

    @contextmanager
    def arm(member: Member) -> Iterator[None]:
        if not usable:
            yield
            return
        current[:] = [member]
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    previous = signal.signal(signal.SIGALRM, ring) if usable else None
    try:
        yield arm
    finally:
        if usable:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


class SyncVectorEnv(VectorEnv):
    """Steps the sub-envs one after another in the calling thread (``backend="sync"``).

    The fastest choice for cheap envs: no threads, no copies. Async sub-envs are driven
    through :func:`~gem_core.to_sync`. See :class:`~gem_core.vector.VectorEnv` for
    autoreset, seeding and error handling.

    Args:
        env_fns: One callable per sub-env, each returning an ``Env`` or ``AsyncEnv``.
        autoreset_mode: ``"next_step"`` (default), ``"same_step"`` or ``"disabled"``.
        on_error: ``"raise"`` (default) or ``"reset"``.
        step_timeout: Seconds one env's request may take (``None``: no limit); enforced with
            ``SIGALRM`` in the main thread only, see :class:`InlineGroup`.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Env | AsyncEnv]],
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        on_error: OnError = "raise",
        step_timeout: float | None = None,
    ) -> None:
        super().__init__(len(env_fns), autoreset_mode, on_error)
        check_timeout("step_timeout", step_timeout)
        members: list[Member] = []
        try:
            for i, fn in enumerate(env_fns):
                members.append(Member(i, to_sync(fn()), self.autoreset_mode, on_error))
        except BaseException:
            close_all([m.env for m in members])
            raise
        self._set_groups([InlineGroup(members, step_timeout)])
        # The hot path of step(): the members in index order, when no timer must wrap their calls.
        self._plain_members: list[Member] | None = members if step_timeout is None else None
        # One env, autoreset on: the batch arrays are copies of these (cheaper than building them).
        self._single: Member | None = None
        if self._plain_members is not None and len(members) == 1 and self.autoreset_mode is not AutoresetMode.DISABLED:
            self._single = members[0]

    def step(self, actions: Sequence[str] | Mapping[int, str]) -> VectorStepReturn:
        """See :meth:`VectorEnv.step`; a full batch (list or tuple) of envs that may step goes straight to them."""
        single = self._single
        if (
            single is not None
            and (type(actions) is list or type(actions) is tuple)
            and len(actions) == 1
            and not self._blocked
        ):
            out = single.step(actions[0])
            if type(out) is tuple:  # not a Failure: no bookkeeping to do
                rewards, terminated, truncated = _ONE_REWARD.copy(), _ONE_FLAG.copy(), _ONE_FLAG.copy()
                rewards[0], terminated[0], truncated[0] = out[1], out[2], out[3]
                return [out[0]], rewards, terminated, truncated, [out[4]]
            return self._finish_step(self._all_indices, [out])
        members = self._plain_members
        if (
            members is not None
            and (type(actions) is list or type(actions) is tuple)
            and len(actions) == self.num_envs
            and not self._blocked
        ):
            return self._finish_step(self._all_indices, list(map(Member.step, members, actions)))
        return super().step(actions)

    def close(self) -> None:
        self._plain_members = self._single = None
        super().close()

    @property
    def envs(self) -> list[Env]:
        """The sub-envs, in index order."""
        group = self._groups[0]
        assert isinstance(group, InlineGroup)
        return [group.members[i].env for i in range(self.num_envs)]
