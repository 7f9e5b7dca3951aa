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
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal, TypeVar

from gem_core.core import AsyncEnv, Env
from gem_core.errors import ConfigError
from gem_core.vector.base import AutoresetMode, Failure, Job, OnError, VectorEnv
from gem_core.vector.process import ProcessEnv, Worker
from gem_core.vector.sync import drive

__all__ = ["AsyncVectorEnv"]

_T = TypeVar("_T")
SyncEnvs = Literal["thread", "inline"]


class _RemoteEnv:
    """A sync handle on an env living in a worker process (calls block on the pipe)."""

    def __init__(self, worker: Worker, slot: int) -> None:
        self.worker, self.slot = worker, slot

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return self.worker.call("reset", self.slot, (seed, options))

    def step(self, action: str) -> Any:
        return self.worker.call("step", self.slot, (action,))

    def close(self) -> None:
        if not self.worker.closed:
            self.worker.call("close", self.slot)


def _drive_guarded(i: int, job: Job, env: Any) -> Any:
    try:
        return drive(job, env)
    except Exception as exc:
        return Failure(i, exc)


async def _drive_async(i: int, job: Job, env: AsyncEnv) -> Any:
    try:
        try:
            op, args = next(job)
            while True:
                value = await (env.reset(seed=args[0], options=args[1]) if op == "reset" else env.step(args[0]))
                op, args = job.send(value)
        except StopIteration as stop:
            return stop.value
    except Exception as exc:
        return Failure(i, exc)


class AsyncVectorEnv(VectorEnv):
    """Runs the sub-envs' calls concurrently, each kind of env the way that suits it.

    * An :class:`~gem_core.AsyncEnv` is awaited natively on a private asyncio event loop
      (thousands of I/O-bound envs on one thread).
    * A sync :class:`~gem_core.Env` runs in a thread pool (``sync_envs="thread"``, for envs that
      block), or inline in the calling thread (``sync_envs="inline"``, fastest for cheap envs).
    * A :class:`~gem_core.vector.ProcessEnv` is built and run in a worker process
      (``make_vec`` does this for specs with ``cpu_bound=True``); envs are spread over
      ``max_processes`` workers, and the thread pool waits on their pipes.

    All three kinds run at the same time within one ``step``. The event loop runs in a
    background thread, so ``reset``/``step`` work from plain code, and
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
        self.workers: list[Worker] = []
        self.native: dict[int, AsyncEnv] = {}  # awaited on the loop
        self.pooled: dict[int, Any] = {}  # sync envs and worker handles, run in the thread pool
        self.inline: dict[int, Env] = {}  # sync envs run in the calling thread
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="gem-async-vector", daemon=True)
        self._thread.start()
        self._pool: ThreadPoolExecutor | None = None
        # a partial per instance, so unregister removes only this one
        self._closer = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._closer)
        try:
            local = len(env_fns) - len(remote)
            n_threads = max_threads or min(64, max(1, n_workers + (local if sync_envs == "thread" else 0)))
            self._pool = ThreadPoolExecutor(max_workers=n_threads, thread_name_prefix="gem-vector")
            self.workers = [Worker() for _ in range(n_workers)]
            builds: list[tuple[int, Future[Any]]] = []
            for i, fn in enumerate(env_fns):
                if isinstance(fn, ProcessEnv):
                    handle = _RemoteEnv(self.workers[len(builds) % n_workers], i)
                    self.pooled[i] = handle
                    # build the remote envs in parallel, one request per env
                    builds.append((i, self._pool.submit(handle.worker.call, "make", i, (fn.factory,))))
                    continue
                env = fn()
                if isinstance(env, AsyncEnv):
                    self.native[i] = env
                elif sync_envs == "thread":
                    self.pooled[i] = env
                else:
                    self.inline[i] = env
            for i, future in builds:
                try:
                    future.result()
                except Exception as exc:
                    raise ConfigError(f"cannot build env {i} in a worker process: {type(exc).__name__}: {exc}") from exc
        except BaseException:
            self.close()
            raise

    @property
    def member_kinds(self) -> list[str]:
        """How each sub-env runs: ``"async"``, ``"thread"``, ``"inline"`` or ``"process"``."""
        kinds = {i: "async" for i in self.native} | {i: "inline" for i in self.inline}
        for i, env in self.pooled.items():
            kinds[i] = "process" if isinstance(env, _RemoteEnv) else "thread"
        return [kinds[i] for i in range(self.num_envs)]

    def _run_jobs(self, jobs: dict[int, Job]) -> dict[int, Any]:
        # Start the async envs on the loop and the pooled ones in threads, run the inline
        # ones here meanwhile, then collect. No event-loop hop for sync envs: it would cost
        # more than a cheap env's step.
        native = {i: job for i, job in jobs.items() if i in self.native}
        on_loop = asyncio.run_coroutine_threadsafe(self._gather(native), self._loop) if native else None
        assert self._pool is not None
        submit = self._pool.submit
        pooled = [(i, submit(_drive_guarded, i, job, self.pooled[i])) for i, job in jobs.items() if i in self.pooled]
        outcomes = {i: _drive_guarded(i, job, self.inline[i]) for i, job in jobs.items() if i in self.inline}
        for i, future in pooled:
            outcomes[i] = future.result()
        if on_loop is not None:
            outcomes.update(on_loop.result())
        return outcomes

    def _submit(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _gather(self, jobs: dict[int, Job]) -> dict[int, Any]:
        results = await asyncio.gather(*(_drive_async(i, job, self.native[i]) for i, job in jobs.items()))
        return dict(zip(jobs, results, strict=True))

    def _close_envs(self) -> None:
        atexit.unregister(self._closer)
        errors: list[BaseException] = []
        if self.native and self._thread.is_alive():

            async def close_native() -> list[Any]:
                return await asyncio.gather(*(env.close() for env in self.native.values()), return_exceptions=True)

            errors += [e for e in self._submit(close_native()) if isinstance(e, BaseException)]
        for env in [*self.pooled.values(), *self.inline.values()]:
            try:
                env.close()
            except Exception as exc:
                errors.append(exc)
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
