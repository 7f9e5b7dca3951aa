"""The asyncio backend: async envs natively, sync envs in threads, CPU-heavy envs in processes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from gem_core.core import AsyncEnv, Env
from gem_core.errors import ConfigError
from gem_core.loop import LoopThread
from gem_core.vector.base import Group, LocalGroup, Pending, VectorEnv
from gem_core.vector.hosted import HostedGroup
from gem_core.vector.member import AsyncMember, AutoresetMode, Member, OnError, Outcome, Request
from gem_core.vector.process import ProcessEnv, close_at_exit, process_group
from gem_core.vector.sync import InlineGroup, close_all

__all__ = ["AsyncVectorEnv", "LoopGroup", "ThreadGroup"]

SyncEnvs = Literal["thread", "inline"]


class LoopGroup(LocalGroup[AsyncMember]):
    """Async members awaited concurrently on a :class:`~gem_core.loop.LoopThread`."""

    kind = "async"

    def __init__(self, members: Sequence[AsyncMember], loop: LoopThread) -> None:
        super().__init__(members)
        self.loop = loop

    async def _gather(self, indices: list[int], requests: Sequence[Request]) -> list[Outcome]:
        members = self.members
        return list(await asyncio.gather(*(members[i].handle(r) for i, r in zip(indices, requests, strict=True))))

    def start(self, indices: list[int], requests: Sequence[Request]) -> Pending:
        return self.loop.submit(self._gather(indices, requests)).result

    def close(self) -> list[BaseException]:
        async def close_envs() -> list[Any]:
            return await asyncio.gather(*(m.env.close() for m in self.members.values()), return_exceptions=True)

        errors: list[BaseException] = []
        if self.loop.started and not self.loop.closed:
            errors = [e for e in self.loop.run_sync(close_envs()) if isinstance(e, BaseException)]
        return errors


class ThreadGroup(LocalGroup[Member]):
    """Sync members served concurrently in a thread pool (for envs that block on I/O)."""

    kind = "thread"

    def __init__(self, members: Sequence[Member], pool: ThreadPoolExecutor) -> None:
        super().__init__(members)
        self.pool = pool

    def start(self, indices: list[int], requests: Sequence[Request]) -> Pending:
        submit, members = self.pool.submit, self.members
        futures = [submit(members[i].handle, r) for i, r in zip(indices, requests, strict=True)]
        return lambda: [f.result() for f in futures]

    def start_steps(self, indices: list[int], actions: Sequence[str]) -> Pending:
        submit, members = self.pool.submit, self.members
        futures = [submit(members[i].step, a) for i, a in zip(indices, actions, strict=True)]
        return lambda: [f.result() for f in futures]

    def close(self) -> list[BaseException]:
        return close_all([m.env for m in self.members.values()])


class AsyncVectorEnv(VectorEnv):
    """Runs the sub-envs' calls concurrently, each kind of env the way that suits it (``backend="async"``).

    * An :class:`~gem_core.AsyncEnv` is awaited natively on a :class:`~gem_core.loop.LoopThread`
      (thousands of I/O-bound envs on one thread).
    * A sync :class:`~gem_core.Env` runs in a thread pool (``sync_envs="thread"``, for envs that
      block), or inline in the calling thread (``sync_envs="inline"``, fastest for cheap envs).
    * A :class:`~gem_core.vector.ProcessEnv` is built and run in a worker process
      (``make_vec`` does this for specs with ``cpu_bound=True``); envs are spread over
      ``max_processes`` workers as in :class:`~gem_core.vector.ProcessVectorEnv`.

    All kinds run at the same time within one ``step``. ``reset``/``step`` work from plain
    code, :meth:`areset`/:meth:`astep` from inside another event loop. ``close()`` closes the
    envs, joins the threads and the loop, and stops the workers and every process they started.

    Args:
        env_fns: Per sub-env, a callable returning an ``Env``/``AsyncEnv`` (built here), or a
            :class:`~gem_core.vector.ProcessEnv`.
        autoreset_mode: ``"next_step"`` (default), ``"same_step"`` or ``"disabled"``.
        on_error: ``"raise"`` (default) or ``"reset"``; see :class:`~gem_core.vector.VectorEnv`.
        sync_envs: ``"thread"`` (default) or ``"inline"``.
        max_threads: Thread-pool size; default one per threaded env, at most 64.
        max_processes: Worker processes for process envs; default ``os.cpu_count()``.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Env | AsyncEnv] | ProcessEnv],
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        on_error: OnError = "raise",
        sync_envs: SyncEnvs = "thread",
        max_threads: int | None = None,
        max_processes: int | None = None,
    ) -> None:
        super().__init__(len(env_fns), autoreset_mode, on_error)
        if sync_envs not in ("thread", "inline"):
            raise ConfigError(f"sync_envs must be 'thread' or 'inline', got {sync_envs!r}")
        mode = self.autoreset_mode
        self._loop = LoopThread("gem-async-vector")
        self._pool: ThreadPoolExecutor | None = None
        native: list[AsyncMember] = []
        threaded: list[Member] = []
        inline: list[Member] = []
        groups: list[Group] = []
        try:
            for i, fn in enumerate(env_fns):
                if isinstance(fn, ProcessEnv):
                    continue
                env = fn()
                if isinstance(env, AsyncEnv):
                    native.append(AsyncMember(i, env, mode, on_error))
                else:
                    (threaded if sync_envs == "thread" else inline).append(Member(i, env, mode, on_error))
            groups = [LoopGroup(native, self._loop), InlineGroup(inline)]
            if threaded:
                self._pool = ThreadPoolExecutor(
                    max_workers=max_threads or min(64, len(threaded)), thread_name_prefix="gem-vector"
                )
                groups.append(ThreadGroup(threaded, self._pool))
            remote = {i: fn.factory for i, fn in enumerate(env_fns) if isinstance(fn, ProcessEnv)}
            if remote:
                groups.append(process_group(remote, mode, on_error, max_processes))
                close_at_exit(self)
        except BaseException:
            for group in groups:
                group.close()
            close_all([m.env for m in threaded + inline])
            self._release()
            raise
        self._set_groups(groups)

    @property
    def member_kinds(self) -> list[str]:
        """How each sub-env runs: ``"async"``, ``"thread"``, ``"inline"`` or ``"process"``."""
        return ["process" if isinstance(g, HostedGroup) else g.kind for g in self._group_of]

    @property
    def workers(self) -> list[Any]:
        """The worker processes' hosts (empty without process envs)."""
        return [h for g in self._groups if isinstance(g, HostedGroup) for h in g.hosts]

    def close(self) -> None:
        if self.closed:
            return
        try:
            super().close()
        finally:
            self._release()

    def _release(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._loop.close()
