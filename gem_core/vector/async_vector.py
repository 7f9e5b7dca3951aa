"""The asyncio vector env: async envs natively, sync envs in threads, CPU-heavy envs in processes."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import os
import threading
import weakref
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, TypeVar

from gem_core.core import AsyncEnv, Env
from gem_core.errors import ConfigError
from gem_core.vector.base import AutoresetMode, Failure, Job, OnError, VectorEnv
from gem_core.vector.process import ProcessEnv, Worker

__all__ = ["AsyncVectorEnv"]

_T = TypeVar("_T")
SyncEnvs = Literal["thread", "inline"]


class _Member:
    """How the vector env reaches one sub-env."""

    kind = "?"

    async def call(self, op: str, args: tuple[Any, ...]) -> Any:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class _Native(_Member):
    kind = "async"

    def __init__(self, env: AsyncEnv) -> None:
        self.env = env

    async def call(self, op: str, args: tuple[Any, ...]) -> Any:
        if op == "reset":
            return await self.env.reset(seed=args[0], options=args[1])
        return await self.env.step(args[0])

    async def close(self) -> None:
        await self.env.close()


class _Threaded(_Member):
    kind = "thread"

    def __init__(self, env: Env, pool: ThreadPoolExecutor | None) -> None:
        self.env = env
        self.pool = pool  # None: call inline on the event loop (cheap, non-blocking envs)

    async def call(self, op: str, args: tuple[Any, ...]) -> Any:
        fn = functools.partial(self.env.reset, seed=args[0], options=args[1]) if op == "reset" else None
        if self.pool is None:
            return fn() if fn is not None else self.env.step(args[0])
        loop = asyncio.get_running_loop()
        if fn is not None:
            return await loop.run_in_executor(self.pool, fn)
        return await loop.run_in_executor(self.pool, self.env.step, args[0])

    async def close(self) -> None:
        if self.pool is None:
            self.env.close()
        else:
            await asyncio.get_running_loop().run_in_executor(self.pool, self.env.close)


class _Remote(_Member):
    kind = "process"

    def __init__(self, worker: Worker, slot: int, pool: ThreadPoolExecutor) -> None:
        self.worker, self.slot, self.pool = worker, slot, pool

    async def call(self, op: str, args: tuple[Any, ...]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, self.worker.call, op, self.slot, args)

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self.pool, self.worker.call, "close", self.slot)


async def _drive(i: int, job: Job, member: _Member) -> Any:
    try:
        try:
            op, args = next(job)
            while True:
                op, args = job.send(await member.call(op, args))
        except StopIteration as stop:
            return stop.value
    except Exception as exc:
        return Failure(i, exc)


class AsyncVectorEnv(VectorEnv):
    """Runs the sub-envs' calls concurrently on a private asyncio event loop.

    * An :class:`~gem_core.AsyncEnv` is awaited natively (thousands of I/O-bound envs on one thread).
    * A sync :class:`~gem_core.Env` runs in a thread pool (``sync_envs="thread"``, for envs that
      block), or inline on the loop (``sync_envs="inline"``, fastest for cheap envs).
    * A :class:`~gem_core.vector.ProcessEnv` is built and run in a worker process
      (``make_vec`` does this for specs with ``cpu_bound=True``); envs are spread over
      ``max_processes`` workers.

    The loop runs in a background thread, so ``reset``/``step`` work from plain code, and
    :meth:`areset`/:meth:`astep` from inside another event loop. ``close()`` closes the envs,
    joins the threads and the loop, and stops the workers and every process they started.

    Args:
        env_fns: Per sub-env, a callable returning an ``Env``/``AsyncEnv`` (built here), or a
            :class:`~gem_core.vector.ProcessEnv`.
        autoreset_mode: ``"next_step"`` (default), ``"same_step"`` or ``"disabled"``.
        on_error: ``"raise"`` (default) or ``"reset"``; see :class:`~gem_core.vector.VectorEnv`.
        sync_envs: ``"thread"`` (default) or ``"inline"``.
        max_threads: Thread-pool size; default one per threaded env and worker, at most 64.
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
        remote = [i for i, fn in enumerate(env_fns) if isinstance(fn, ProcessEnv)]
        n_workers = min(len(remote), max_processes or os.cpu_count() or 1)
        self.members: list[_Member] = []
        self.workers: list[Worker] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="gem-async-vector", daemon=True)
        self._thread.start()
        self._pool: ThreadPoolExecutor | None = None
        # a partial per instance, so unregister removes only this one
        self._closer = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._closer)
        try:
            local = [fn for fn in env_fns if not isinstance(fn, ProcessEnv)]
            n_threads = max_threads or min(64, max(1, n_workers + (len(local) if sync_envs == "thread" else 0)))
            self._pool = ThreadPoolExecutor(max_workers=n_threads, thread_name_prefix="gem-vector")
            self.workers = [Worker() for _ in range(n_workers)]
            slots = {idx: n for n, idx in enumerate(remote)}
            for i, fn in enumerate(env_fns):
                if isinstance(fn, ProcessEnv):
                    self.members.append(_Remote(self.workers[slots[i] % n_workers], i, self._pool))
                    continue
                env = fn()
                if isinstance(env, AsyncEnv):
                    self.members.append(_Native(env))
                else:
                    self.members.append(_Threaded(env, self._pool if sync_envs == "thread" else None))
            # build the remote envs in parallel, one request per env
            builds = [
                self._pool.submit(self.workers[slots[i] % n_workers].call, "make", i, (env_fns[i].factory,))  # type: ignore[union-attr]
                for i in remote
            ]
            for i, future in zip(remote, builds, strict=True):
                try:
                    future.result()
                except Exception as exc:
                    raise ConfigError(f"cannot build env {i} in a worker process: {type(exc).__name__}: {exc}") from exc
        except BaseException:
            self.close()
            raise

    @property
    def member_kinds(self) -> list[str]:
        """How each sub-env runs: ``"async"``, ``"thread"`` (also inline sync envs) or ``"process"``."""
        return [m.kind for m in self.members]

    def _submit(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _gather(self, jobs: dict[int, Job]) -> dict[int, Any]:
        results = await asyncio.gather(*(_drive(i, job, self.members[i]) for i, job in jobs.items()))
        return dict(zip(jobs, results, strict=True))

    def _run_jobs(self, jobs: dict[int, Job]) -> dict[int, Any]:
        return self._submit(self._gather(jobs))

    async def _arun_jobs(self, jobs: dict[int, Job]) -> dict[int, Any]:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._gather(jobs), self._loop))

    def _close_envs(self) -> None:
        atexit.unregister(self._closer)
        errors: list[BaseException] = []
        if self._thread.is_alive():

            async def close_all() -> list[Any]:
                return await asyncio.gather(*(m.close() for m in self.members), return_exceptions=True)

            errors += [e for e in self._submit(close_all()) if isinstance(e, BaseException)]
        for worker in self.workers:  # ask all first: workers exit in parallel
            worker.request_shutdown()
        for worker in self.workers:
            worker.shutdown()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        self._loop.close()
        if errors:
            raise errors[0]


def _close_at_exit(ref: weakref.ref[AsyncVectorEnv]) -> None:
    # Non-daemon workers would make interpreter exit wait forever; close what the user forgot.
    vec = ref()
    if vec is not None:
        with contextlib.suppress(Exception):
            vec.close()
