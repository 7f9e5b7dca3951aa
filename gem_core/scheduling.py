"""Continuous rollouts: N episodes in flight, a new one the moment one ends, env steps overlapped with generation.

:meth:`EpisodeEngine.play_batch <gem_core.episode.EpisodeEngine.play_batch>` is lockstep:
one batched generate per turn, so every turn waits for the batch's slowest reply, and no
env steps while the model generates. :class:`RolloutScheduler` plays the same episodes
(the same :class:`~gem_core.episode.EpisodeSession` state machine, so the same records)
continuously:

* up to ``max_in_flight`` episodes at once, each its own task; when one ends the next job
  starts (``jobs`` may be a lazy, endless iterator);
* each episode steps its env as soon as its reply arrives (sync envs in the scheduler's
  thread pool, async envs on the loop), while the others generate;
* two kinds of engine: a per-request async ``generate`` (an async server: vLLM's
  ``AsyncLLM``, SGLang, an OpenAI-compatible endpoint; its own scheduler batches), or a
  ``batch_generate`` (an offline engine such as ``LLM.generate``; sync ones run in a worker
  thread): a call goes out whenever the engine is free and requests wait, with whoever
  waits, instead of once per turn for everyone;
* backpressure: finished episodes go into a buffer of ``buffer_size`` the consumer reads
  (:meth:`RolloutScheduler.episodes`); while it is full, finished episodes keep their
  slots and no new episode starts;
* weight updates (:meth:`RolloutScheduler.update_policy`): no new request goes out, the
  ones in flight finish (or, with an ``abort`` hook and ``EpisodeLimits(max_resumes=...)``,
  come back ``"abort"`` at once and are resumed under the new weights: partial rollouts),
  the weights are swapped, ``engine.policy_version`` moves on, and requests flow again.
  Every turn records per token the version that sampled it; ``max_policy_lag`` drops (and
  replays) or fails episodes that fall too far behind.

Faults stay in their episode: an env error, a ``generate`` that raises or breaks the
contract, a failed batched call (each of its episodes) end only those episodes, delivered
with ``end_reason == "error"``, the exception in :attr:`EpisodeSession.error` and
``error_phase`` in its metadata; no other episode sees them. Only ``BaseException`` s
(cancellation, ``KeyboardInterrupt``) and errors of the ``jobs`` iterator itself propagate.

With a deterministic policy every episode is the one :meth:`play_batch` plays for its
job, whatever the latencies and the order of completion (the conformance suite checks it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Union

from gem_core.core import AsyncEnv, Env
from gem_core.episode import (
    AsyncGenerate,
    EpisodeEngine,
    EpisodeJob,
    EpisodeSession,
    Generation,
    TurnRequest,
    add_note,
    check_batch,
    describe_request,
)
from gem_core.errors import ConfigError, PolicyLagError

__all__ = ["AnyBatchGenerate", "RolloutScheduler", "SchedulerStats"]

#: ``generate(requests) -> answers``, sync (run in a worker thread) or async.
AnyBatchGenerate = Callable[[list[TurnRequest]], Union[Sequence[Union[Generation, str]], Awaitable[Any]]]
#: A hook of :meth:`RolloutScheduler.update_policy`: a plain call or a coroutine function.
Hook = Callable[[], Union[Awaitable[Any], Any]]

#: A job whose episode is dropped as stale is played at most this many times; the last stale one is handed out.
MAX_REPLAYS = 8


@dataclass
class SchedulerStats:
    """Counters of a :class:`RolloutScheduler` (cumulative over its runs).

    Attributes:
        episodes: Episodes handed out (failed and stale ones included).
        turns: Turns of those episodes.
        failed: Episodes that ended with an error (env, generate or the contract).
        generate_calls: Calls of ``generate`` / ``batch_generate``.
        resumed: Generations aborted and resumed (partial rollouts).
        replayed: Episodes dropped by ``max_policy_lag`` and played again from their job.
        updates: Weight updates (:meth:`RolloutScheduler.update_policy`).
    """

    episodes: int = 0
    turns: int = 0
    failed: int = 0
    generate_calls: int = 0
    resumed: int = 0
    replayed: int = 0
    updates: int = 0


class _Stale:
    """Answer of the batch dispatcher for a request whose episode fell behind ``max_policy_lag`` while it waited."""


_STALE = _Stale()


class RolloutScheduler:
    """Plays jobs continuously against an inference engine; see the module docstring.

    Args:
        engine: The episode engine (tokenizer, limits, ``policy_version``).
        generate: ``await generate(request) -> Generation``: one request at a time (an
            async server). Give exactly one of ``generate`` and ``batch_generate``.
        batch_generate: ``generate(requests) -> answers`` (sync: run in a worker thread; or
            async): a batched engine, called whenever it is free and requests wait.
        max_in_flight: Episodes played at once.
        buffer_size: Finished episodes the consumer may leave unread before the scheduler
            stops starting new ones (backpressure); default ``max_in_flight``.
        max_batch: Most requests per ``batch_generate`` call (``None``: all that wait).
        max_concurrent_calls: ``batch_generate`` calls in flight at once (an offline
            engine takes one; an async batched server may take more).
        env_threads: Threads stepping sync envs (default ``max_in_flight``: an env that
            sleeps on a grader or a tool server holds one thread, not the loop).
        close_envs: Close each job's env once its episode is handed out.

    Raises:
        ConfigError: Not exactly one engine, or a bad number.
    """

    def __init__(
        self,
        engine: EpisodeEngine,
        *,
        generate: AsyncGenerate | None = None,
        batch_generate: AnyBatchGenerate | None = None,
        max_in_flight: int = 64,
        buffer_size: int | None = None,
        max_batch: int | None = None,
        max_concurrent_calls: int = 1,
        env_threads: int | None = None,
        close_envs: bool = False,
    ) -> None:
        if (generate is None) == (batch_generate is None):
            raise ConfigError("give exactly one of generate (per request, async) or batch_generate (batched)")
        for name, value in (
            ("max_in_flight", max_in_flight),
            ("buffer_size", buffer_size),
            ("max_batch", max_batch),
            ("max_concurrent_calls", max_concurrent_calls),
            ("env_threads", env_threads),
        ):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
        self.engine = engine
        self.generate = generate
        self.batch_generate = batch_generate
        self.max_in_flight = max_in_flight
        self.buffer_size = buffer_size or max_in_flight
        self.max_batch = max_batch
        self.max_concurrent_calls = max_concurrent_calls
        self.env_threads = env_threads or max_in_flight
        self.close_envs = close_envs
        self.stats = SchedulerStats()
        self._pool: ThreadPoolExecutor | None = None
        self._gate: asyncio.Event | None = None  # set: requests may go out; cleared during a weight update
        self._idle: asyncio.Event | None = None  # set whenever no generate call is in flight
        self._update_lock: asyncio.Lock | None = None
        self._calls = 0
        self._waiting: list[tuple[EpisodeSession, TurnRequest, asyncio.Future[Any]]] = []
        self._dispatching = False
        self._batch_calls = 0

    # ------------------------------------------------------------------ public API

    async def episodes(self, jobs: Iterable[EpisodeJob]) -> AsyncIterator[EpisodeSession]:
        """Play ``jobs`` and yield each finished session as it ends (completion order).

        ``TurnRequest.episode_index`` and ``session.index`` are the job's position in ``jobs``.
        Leaving the loop early cancels the episodes still running (use
        ``contextlib.aclosing`` to do it at once rather than at garbage collection).

        Raises:
            Exception: Only what the ``jobs`` iterator raised; episode faults are delivered.
        """
        self._setup()
        buffer: asyncio.Queue[EpisodeSession | BaseException | None] = asyncio.Queue(maxsize=self.buffer_size)
        slots = asyncio.Semaphore(self.max_in_flight)
        tasks: set[asyncio.Task[None]] = set()

        async def run_one(index: int, job: EpisodeJob) -> None:
            try:
                item: EpisodeSession | BaseException = await self._play_job(index, job)
            except Exception as exc:  # a bug of the scheduler's own: never a silently missing episode
                item = exc
            try:
                await buffer.put(item)  # blocks while the consumer's buffer is full: the slot stays taken
            finally:
                slots.release()

        async def feed() -> None:
            try:
                for index, job in enumerate(jobs):
                    await slots.acquire()
                    task = asyncio.get_running_loop().create_task(run_one(index, job))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                for _ in range(self.max_in_flight):  # every episode handed out
                    await slots.acquire()
            except Exception as exc:  # the jobs iterator failed: the consumer gets it
                await buffer.put(exc)
            else:
                await buffer.put(None)

        feeder = asyncio.get_running_loop().create_task(feed())
        try:
            while True:
                item = await buffer.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            feeder.cancel()
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(feeder, *tasks, return_exceptions=True)

    async def play_all(self, jobs: Iterable[EpisodeJob]) -> list[EpisodeSession]:
        """Play every job to its end; the sessions in job order (as :meth:`EpisodeEngine.play_batch` returns them)."""
        sessions = [session async for session in self.episodes(jobs)]
        return sorted(sessions, key=lambda s: s.index)

    async def update_policy(
        self, version: int | None = None, *, swap: Hook | None = None, abort: Hook | None = None
    ) -> int:
        """Swap the weights between requests; return the new ``engine.policy_version``.

        Requests not yet sent wait (episodes pause at their turn boundary, or, resumed,
        mid-turn); ``abort`` (e.g. the server's abort of its running requests) is called,
        then the scheduler waits until no generate call is in flight (without ``abort``
        they finish under the old weights), calls ``swap`` (load the new weights), sets
        ``engine.policy_version`` (to ``version``, default one more) and lets requests flow.

        Args:
            version: The new version; default the current one plus one.
            swap: Loads the new weights (sync or async); ``None`` when the caller did already.
            abort: Makes the engine give up its running requests (answers ``"abort"``, kept
                and resumed under ``EpisodeLimits(max_resumes=...)``).
        """
        self._setup()
        assert self._gate is not None and self._idle is not None and self._update_lock is not None
        async with self._update_lock:
            self._gate.clear()
            try:
                if abort is not None:
                    await _call(abort)
                while self._calls:
                    self._idle.clear()
                    await self._idle.wait()
                if swap is not None:
                    await _call(swap)
                self.engine.policy_version = self.engine.policy_version + 1 if version is None else version
                self.stats.updates += 1
            finally:
                self._gate.set()
                self._kick()
        return self.engine.policy_version

    def close(self) -> None:
        """Stop the env threads (idempotent; the scheduler may be used again, with new threads)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    # ------------------------------------------------------------------ episodes

    def _setup(self) -> None:
        if self._gate is None:
            self._gate, self._idle, self._update_lock = asyncio.Event(), asyncio.Event(), asyncio.Lock()
            self._gate.set()
            self._idle.set()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.env_threads, thread_name_prefix="gem-rollout-env")

    async def _play_job(self, index: int, job: EpisodeJob) -> EpisodeSession:
        for _ in range(MAX_REPLAYS):
            session = await self._play(index, job)
            if session.end_reason != "stale":
                break
            self.stats.replayed += 1  # dropped by max_policy_lag: the same job again, under the current weights
        if self.close_envs:
            try:
                await self._env_call(job.env, "close")
            except Exception as exc:  # the episode is played; a close that fails is noted, not fatal
                session.metadata["close_error"] = f"{type(exc).__name__}: {exc}"
        self.stats.episodes += 1
        self.stats.turns += len(session.turns)
        self.stats.failed += session.end_reason == "error"
        self.stats.resumed += session.resumes
        return session

    async def _play(self, index: int, job: EpisodeJob) -> EpisodeSession:
        session = self.engine.session(
            env_id=job.env_id or _spec_id(job.env),
            seed=job.seed,
            episode_id=job.episode_id,
            index=index,
            system_prompt=job.system_prompt,
        )
        phase = "reset"
        try:
            observation, _ = await self._env_call(job.env, "reset", seed=job.seed, options=job.options)
            session.begin(observation)
            while not session.done:
                phase = "generate"
                answer = await self._generate(session)
                if answer is _STALE:
                    break
                action = session.accept(answer)
                if action is None:
                    continue
                phase = "step"
                session.observe(*await self._env_call(job.env, "step", action))
            if not session.done or session.end_reason == "error":
                return session
            session.enforce_policy_lag(finished=True)
        except Exception as exc:  # this episode's fault only; cancellation is no Exception
            _fail(session, exc, "policy_lag" if isinstance(exc, PolicyLagError) else phase)
        return session

    async def _env_call(self, env: Env | AsyncEnv, name: str, *args: Any, **kwargs: Any) -> Any:
        method = getattr(env, name)
        if isinstance(env, AsyncEnv):
            return await method(*args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._pool, lambda: method(*args, **kwargs))

    # ------------------------------------------------------------------ generation

    async def _generate(self, session: EpisodeSession) -> Any:
        """The answer to ``session``'s next request, sent when no weight update is under way."""
        assert self._gate is not None
        while not self._gate.is_set():
            await self._gate.wait()
        if not session.enforce_policy_lag():
            return _STALE
        request = session.request()
        if self.generate is None:
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._waiting.append((session, request, future))
            self._kick()
            return await future
        version = self.engine.policy_version
        self._begin_call()
        try:
            return _stamped(await self.generate(request), version)
        finally:
            self._end_call()

    def _begin_call(self) -> None:
        assert self._idle is not None
        self._calls += 1
        self.stats.generate_calls += 1
        self._idle.clear()

    def _end_call(self) -> None:
        assert self._idle is not None
        self._calls -= 1
        if not self._calls:
            self._idle.set()

    def _kick(self) -> None:
        """Start a batched call if requests wait, the engine has room and no weight update is under way."""
        gate = self._gate
        if self._dispatching or not self._waiting or gate is None or not gate.is_set():
            return
        if self._batch_calls >= self.max_concurrent_calls:
            return
        self._dispatching = True
        asyncio.get_running_loop().create_task(self._dispatch())

    async def _dispatch(self) -> None:
        await asyncio.sleep(0)  # episodes whose reply just arrived may join this call
        self._dispatching = False
        assert self._gate is not None and self.batch_generate is not None
        if not self._gate.is_set() or self._batch_calls >= self.max_concurrent_calls:
            return
        batch: list[tuple[EpisodeSession, TurnRequest, asyncio.Future[Any]]] = []
        while self._waiting and (self.max_batch is None or len(batch) < self.max_batch):
            session, request, future = self._waiting.pop(0)
            if future.done():
                continue
            try:  # it may have fallen behind while a weight update held it back
                fresh = session.enforce_policy_lag()
            except PolicyLagError as exc:
                future.set_exception(exc)
                continue
            if not fresh:
                future.set_result(_STALE)
                continue
            batch.append((session, request, future))
        if not batch:
            return
        requests = [request for _, request, _ in batch]
        version = self.engine.policy_version
        self._batch_calls += 1
        self._begin_call()
        self._kick()  # more requests than max_batch, and room for another call: it goes out too
        try:
            outputs = await self._call_batch(requests)
        except Exception as exc:  # the whole call failed: each of its episodes fails with it, no other
            add_note(exc, f"in the batched generate call for episodes {', '.join(map(describe_request, requests))}")
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
        except BaseException as exc:
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            raise
        else:
            for (_, _, future), output in zip(batch, outputs, strict=True):
                if not future.done():
                    future.set_result(_stamped(output, version))
        finally:
            self._batch_calls -= 1
            self._end_call()
            self._kick()

    async def _call_batch(self, requests: list[TurnRequest]) -> list[Any]:
        assert self.batch_generate is not None
        fn = self.batch_generate
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):  # noqa: B004
            result: Any = await fn(requests)  # type: ignore[misc]
        else:  # a blocking engine: in a thread, so envs step and episodes go on meanwhile
            result = await asyncio.to_thread(fn, requests)
            if inspect.isawaitable(result):
                result = await result
        return check_batch(result, requests, token_mode=self.engine.token_mode)


def _stamped(output: Any, version: int) -> Any:
    """``output`` with the version it was sampled under (a weight update waits for every call to return)."""
    if isinstance(output, Generation) and output.policy_version is None:
        return dataclasses.replace(output, policy_version=version)
    return output


def _fail(session: EpisodeSession, exc: Exception, phase: str) -> None:
    # No note on the exception: a failed batched call's one exception is shared by its episodes;
    # each session names its own episode.
    if session.error is not exc:
        session.fail(exc, phase)


async def _call(hook: Hook) -> None:
    result = hook()
    if inspect.isawaitable(result):
        await result


def _spec_id(env: Any) -> str | None:
    return getattr(getattr(env, "spec", None), "id", None)
