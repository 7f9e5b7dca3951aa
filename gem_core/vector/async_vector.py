"""The asyncio backend: async envs natively, sync envs in threads, CPU-heavy envs in processes."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Literal

from gem_core.core import AsyncEnv, Env
from gem_core.errors import ConfigError
from gem_core.loop import LoopThread
from gem_core.vector.base import Group, LocalGroup, Pending, VectorEnv, check_timeout
from gem_core.vector.hosted import HostedGroup
from gem_core.vector.member import AsyncMember, AutoresetMode, Member, MemberState, OnError, Outcome, Request
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
    """Sync members served concurrently in a thread pool (for envs that block on I/O).

    With a ``timeout``, a member whose request runs past it fails with
    :class:`~gem_core.errors.EnvStepTimeout` (``on_error`` applies). A thread cannot be
    interrupted: the hung call keeps its thread (and its env object) until it returns, and
    the interpreter waits for it at exit. The group moves on with a fresh pool and a new env
    built from the env's factory, continuing its seed stream.
    """

    kind = "thread"

    def __init__(
        self,
        members: Sequence[Member],
        pool: ThreadPoolExecutor,
        factories: dict[int, Callable[[], Env | AsyncEnv]] | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__(members)
        self.pool = pool
        self.max_workers: int = getattr(pool, "_max_workers", len(members) or 1)
        self.factories = factories or {}
        self.timeout = timeout
        self.abandoned: list[ThreadPoolExecutor] = []
        # Whether a batch starts in the pool before the caller waits for it: needed only when the
        # caller first waits for other groups (async envs, processes) of the same vector env.
        self.start_early = True

    def start(self, indices: list[int], requests: Sequence[Request]) -> Pending:
        members = self.members
        if self.timeout is None:
            return self._batched([(members[i].handle, r) for i, r in zip(indices, requests, strict=True)])
        submit = self.pool.submit
        futures = [submit(members[i].handle, r) for i, r in zip(indices, requests, strict=True)]
        return self._waiter(indices, futures)

    def start_steps(self, indices: list[int], actions: Sequence[str]) -> Pending:
        members = self.members
        if self.timeout is None:
            return self._batched([(members[i].step, a) for i, a in zip(indices, actions, strict=True)])
        submit = self.pool.submit
        futures = [submit(members[i].step, a) for i, a in zip(indices, actions, strict=True)]
        return self._waiter(indices, futures)

    def _batched(self, calls: list[tuple[Callable[[Any], Outcome], Any]]) -> Pending:
        """Serve ``calls`` from a shared queue of work, with as many threads as the envs keep busy.

        One job starts in the pool now (when the caller has other groups to wait for first), and
        the caller's thread joins in when it waits. A job,
        before it runs a call, starts another job if calls are left and the last job started
        is already running: threads are added only as fast as they get to run. Envs that block
        (I/O, sleeps: they release the GIL) thus spread over the threads within a few thread
        wake-ups, and a slow env delays only the job that has it; cheap envs (pure Python, the
        GIL held) are served by the thread that runs, mostly the caller's, for about one
        hand-off between threads per batch instead of one per env. At most ``max_threads``
        threads serve a batch at once, the caller's included.
        """
        total = len(calls)
        outcomes: list[Outcome] = [()] * total
        # next() on a count is one C call, atomic under the GIL: each position is taken once.
        positions = itertools.count()
        jobs: list[Future[None]] = []
        serving = [0]  # threads serving the batch, the caller's included
        waiting = [False]  # a job was started in the pool and has not run yet
        lock = threading.Lock()
        submit, limit = self.pool.submit, self.max_workers

        def join() -> bool:
            with lock:
                if serving[0] >= limit:
                    return False
                serving[0] += 1
                return True

        def start_job() -> None:
            if join():
                waiting[0] = True
                jobs.append(submit(pool_job))

        def job() -> None:
            while (position := next(positions)) < total:
                if not waiting[0] and position + 1 < total and serving[0] < limit:
                    start_job()  # a helper for the rest, in case this call blocks
                call, argument = calls[position]
                outcomes[position] = call(argument)

        def pool_job() -> None:
            waiting[0] = False
            job()

        if total and self.start_early:
            start_job()

        def wait() -> list[Outcome]:
            if join():
                job()  # the caller's thread serves calls too, instead of only waiting
            finished = 0
            while finished < len(jobs):  # a job starts its helper before its own call: none is missed
                jobs[finished].result()
                finished += 1
            return outcomes

        return wait

    def _waiter(self, indices: list[int], futures: list[Future[Outcome]]) -> Pending:
        if self.timeout is None:
            return lambda: [f.result() for f in futures]
        timeout = self.timeout

        def wait() -> list[Outcome]:
            deadline = time.monotonic() + timeout
            outcomes: list[Outcome] = []
            for i, future in zip(indices, futures, strict=True):
                try:
                    outcomes.append(future.result(max(0.0, deadline - time.monotonic())))
                except FutureTimeout:
                    outcomes.append(self._replace_hung(i, timeout))
            return outcomes

        return wait

    def _replace_hung(self, index: int, timeout: float) -> Outcome:
        """The member at ``index`` is stuck in its thread: leave it there, go on with a new env and pool."""
        old = self.members[index]
        failure = old.failure(old.timeout_error(timeout, " (its thread cannot be interrupted and was abandoned)"), "")
        self.abandoned.append(self.pool)
        self.pool.shutdown(wait=False)
        self.pool = ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="gem-vector")
        factory = self.factories.get(index)
        if factory is None:
            return failure  # the env stays in use by its thread; step() refuses it until it is reset
        try:
            env = factory()
            assert isinstance(env, Env)
        except Exception as exc:
            return old.failure(old.timeout_error(timeout, f"; building a replacement env failed ({exc!r})"), "")
        state = MemberState(old.seeds.root, old.seeds.episodes, None)
        member = self.members[index] = Member(index, env, old.mode, old.on_error, state)
        try:  # on_error applies, with the same bound
            return self.pool.submit(member.recover, failure).result(timeout)
        except FutureTimeout:
            return failure

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
        max_threads: Most threads serving threaded envs at once (the calling thread, which serves
            them too while it waits, included); default one per threaded env, at most 64.
        max_processes: Worker processes for process envs; default ``os.cpu_count()``.
        step_timeout: Seconds one env's request may take (``None``: no limit): async envs
            are cancelled, threads abandoned (:class:`ThreadGroup`), inline envs interrupted
            by ``SIGALRM`` in the main thread (:class:`~gem_core.vector.sync.InlineGroup`),
            worker processes replaced. The env fails with :class:`~gem_core.errors.EnvStepTimeout`.
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
        step_timeout: float | None = None,
    ) -> None:
        super().__init__(len(env_fns), autoreset_mode, on_error)
        check_timeout("step_timeout", step_timeout)
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
                    native[-1].timeout = step_timeout
                else:
                    (threaded if sync_envs == "thread" else inline).append(Member(i, env, mode, on_error))
            groups = [LoopGroup(native, self._loop), InlineGroup(inline, step_timeout)]
            if threaded:
                self._pool = ThreadPoolExecutor(
                    max_workers=max_threads or min(64, len(threaded)), thread_name_prefix="gem-vector"
                )
                factories = {m.index: env_fns[m.index] for m in threaded}
                threads = ThreadGroup(threaded, self._pool, factories, step_timeout)  # type: ignore[arg-type]
                threads.start_early = bool(native or inline or len(threaded) < len(env_fns))
                groups.append(threads)
            remote = {i: fn.factory for i, fn in enumerate(env_fns) if isinstance(fn, ProcessEnv)}
            if remote:
                groups.append(process_group(remote, mode, on_error, max_processes, step_timeout))
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
        for group in self._groups:
            if isinstance(group, ThreadGroup) and group.pool is not self._pool:
                group.pool.shutdown(wait=True)  # the pool that replaced one with a hung thread
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._loop.close()
