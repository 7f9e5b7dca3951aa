"""The synchronous backend: a loop over the sub-envs in the caller's thread."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gem_core.core import AsyncEnv, Env, to_sync
from gem_core.vector.base import LocalGroup, Pending, VectorEnv
from gem_core.vector.member import AutoresetMode, Member, OnError, Outcome, Request

__all__ = ["InlineGroup", "SyncVectorEnv", "close_all"]


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
    """Members served one after another in the calling thread."""

    kind = "inline"

    def start(self, indices: list[int], requests: Sequence[Request]) -> Pending:
        members = self.members
        outcomes = [members[i].handle(r) for i, r in zip(indices, requests, strict=True)]
        return lambda: outcomes

    def start_steps(self, indices: list[int], actions: Sequence[str]) -> Pending:
        members = self.members
        outcomes: list[Outcome] = [members[i].step(a) for i, a in zip(indices, actions, strict=True)]
        return lambda: outcomes

    def close(self) -> list[BaseException]:
        return close_all([m.env for m in self.members.values()])


class SyncVectorEnv(VectorEnv):
    """Steps the sub-envs one after another in the calling thread (``backend="sync"``).

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
        members: list[Member] = []
        try:
            for i, fn in enumerate(env_fns):
                members.append(Member(i, to_sync(fn()), self.autoreset_mode, on_error))
        except BaseException:
            close_all([m.env for m in members])
            raise
        self._set_groups([InlineGroup(members)])

    @property
    def envs(self) -> list[Env]:
        """The sub-envs, in index order."""
        group = self._groups[0]
        assert isinstance(group, InlineGroup)
        return [group.members[i].env for i in range(self.num_envs)]
