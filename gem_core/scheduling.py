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

Faults stay in their episode: an env error, a ``generate`` that raises, breaks the contract,
raises ``asyncio.CancelledError`` of its own or does not answer within ``request_timeout``,
a failed batched call (each of its episodes) end only those episodes, delivered with
``end_reason == "error"``, the exception in :attr:`EpisodeSession.error` and
``error_phase`` in its metadata; no other episode sees them. Only ``BaseException`` s
(cancellation of the scheduler, ``KeyboardInterrupt``) and errors of the ``jobs`` iterator
itself (or a job refused at submission) propagate; every episode already started is handed
out first (or, when the scheduler is cancelled, its env closed under ``close_envs``).

Bounds (nothing waits forever): each request (or batched call) gets ``request_timeout``
seconds, then it is cancelled and its episodes fail with
:class:`~gem_core.errors.GenerateTimeout`; a weight update's ``abort`` gives the requests
in flight ``abort_timeout`` seconds to come back, then gives them up the same way;
its ``swap`` gets ``swap_timeout`` seconds (:class:`~gem_core.errors.WeightUpdateTimeout`).

With a deterministic policy every episode is the one :meth:`play_batch` plays for its
job, whatever the latencies and the order of completion (the conformance suite checks it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import itertools
import math
import operator
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Sequence
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
from gem_core.errors import (
    ConfigError,
    GenerateCancelled,
    GenerateContractError,
    GenerateTimeout,
    PolicyLagError,
    PolicyVersionError,
    SharedEnvError,
    WeightUpdateTimeout,
)

__all__ = [
    "DEFAULT_ABORT_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_SWAP_TIMEOUT",
    "ENV_CLOSE_TIMEOUT",
    "AnyBatchGenerate",
    "RolloutScheduler",
    "SchedulerStats",
]

#: ``generate(requests) -> answers``, sync (run in a worker thread) or async.
AnyBatchGenerate = Callable[[list[TurnRequest]], Union[Sequence[Union[Generation, str]], Awaitable[Any]]]
#: A hook of :meth:`RolloutScheduler.update_policy`: a plain call or a coroutine function.
Hook = Callable[[], Union[Awaitable[Any], Any]]

#: A job whose episode is dropped as stale is played at most this many times; the last stale one is handed out.
MAX_REPLAYS = 8
#: Seconds a request (or a batched call) may take before it is given up (a long reply on a busy server
#: takes minutes; a hung one never ends).
DEFAULT_REQUEST_TIMEOUT = 600.0
#: Seconds the requests in flight get to come back after a weight update's ``abort`` (an abort is quick).
DEFAULT_ABORT_TIMEOUT = 60.0
#: Seconds a weight update's ``swap`` hook may take.
DEFAULT_SWAP_TIMEOUT = 600.0
#: Seconds closing the env of an episode cancelled with the scheduler may take (``close_envs``).
ENV_CLOSE_TIMEOUT = 30.0


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
        given_up: Requests given up (past ``request_timeout``, or ignoring an abort past ``abort_timeout``).
        cancelled: Episodes cancelled with the scheduler (never handed out; envs closed under ``close_envs``).
    """

    episodes: int = 0
    turns: int = 0
    failed: int = 0
    generate_calls: int = 0
    resumed: int = 0
    replayed: int = 0
    updates: int = 0
    given_up: int = 0
    cancelled: int = 0


class _Stale:
    """Answer of the batch dispatcher for a request whose episode fell behind ``max_policy_lag`` while it waited."""


_STALE = _Stale()

#: A request waiting for its answer: its episode, the request, and where the answer goes.
_Entry = tuple[EpisodeSession, TurnRequest, "asyncio.Future[Any]"]


class _Call:
    """One generate call in flight: a per-request call (one entry) or a batched one."""

    __slots__ = ("batched", "entries", "task", "timer", "version")

    def __init__(self, entries: list[_Entry], version: int, *, batched: bool) -> None:
        self.entries = entries
        self.version = version  # the weights the requests were sent under
        self.batched = batched
        self.task: asyncio.Task[Any] | None = None
        self.timer: asyncio.TimerHandle | None = None


class RolloutScheduler:
    """Plays jobs continuously against an inference engine; see the module docstring.

    Args:
        engine: The episode engine (tokenizer, limits, ``policy_version``).
        generate: ``await generate(request) -> Generation``: one request at a time (an
            async server). Give exactly one of ``generate`` and ``batch_generate``.
        batch_generate: ``generate(requests) -> answers`` (sync: run in a worker thread; or
            async): a batched engine, called whenever it is free and requests wait. Its
            answers come in request order, each a :class:`Generation` carrying its request's
            ``request_id`` (checked: a reordered, duplicated or missing answer fails its
            episode with a :class:`~gem_core.errors.GenerateContractError`).
        max_in_flight: Episodes played at once.
        buffer_size: Finished episodes the consumer may leave unread before the scheduler
            stops starting new ones (backpressure); default ``max_in_flight``.
        max_batch: Most requests per ``batch_generate`` call (``None``: all that wait).
        max_concurrent_calls: ``batch_generate`` calls in flight at once (an offline
            engine takes one; an async batched server may take more).
        env_threads: Threads stepping sync envs (default ``max_in_flight``: an env that
            sleeps on a grader or a tool server holds one thread, not the loop).
        close_envs: Close each job's env once its episode is handed out (or cancelled).
        request_timeout: Seconds one request (a batched call: the call) may take; then it
            is cancelled and its episodes fail with :class:`~gem_core.errors.GenerateTimeout`.
        abort_timeout: Seconds the requests in flight get to come back after
            :meth:`update_policy`'s ``abort``; the ones still out are given up the same way.
        swap_timeout: Seconds :meth:`update_policy`'s ``swap`` may take.

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
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        abort_timeout: float = DEFAULT_ABORT_TIMEOUT,
        swap_timeout: float = DEFAULT_SWAP_TIMEOUT,
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
        for name, seconds in (
            ("request_timeout", request_timeout),
            ("abort_timeout", abort_timeout),
            ("swap_timeout", swap_timeout),
        ):
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < math.inf:
                raise ConfigError(f"{name} must be a finite number of seconds > 0, got {seconds!r}")
        self.engine = engine
        self.generate = generate
        self.batch_generate = batch_generate
        self.max_in_flight = max_in_flight
        self.buffer_size = buffer_size or max_in_flight
        self.max_batch = max_batch
        self.max_concurrent_calls = max_concurrent_calls
        self.env_threads = env_threads or max_in_flight
        self.close_envs = close_envs
        self.request_timeout = float(request_timeout)
        self.abort_timeout = float(abort_timeout)
        self.swap_timeout = float(swap_timeout)
        self.stats = SchedulerStats()
        self._pool: ThreadPoolExecutor | None = None
        self._gate: asyncio.Event | None = None  # set: requests may go out; cleared during a weight update
        self._idle: asyncio.Event | None = None  # set whenever no generate call is in flight
        self._update_lock: asyncio.Lock | None = None
        self._in_flight: set[_Call] = set()
        self._waiting: list[_Entry] = []
        self._dispatching = False
        self._batch_calls = 0

    # ------------------------------------------------------------------ public API

    async def episodes(self, jobs: Iterable[EpisodeJob]) -> AsyncIterator[EpisodeSession]:
        """Play ``jobs`` and yield each finished session as it ends (completion order).

        ``TurnRequest.episode_index`` and ``session.index`` are the job's position in ``jobs``.
        Leaving the loop early (or cancelling the consumer) cancels the episodes still
        running; under ``close_envs`` their envs are closed (use ``contextlib.aclosing``
        to do it at once rather than at garbage collection).

        Raises:
            SharedEnvError: A job's env is the env of a job still being played; raised
                once every episode already started has been handed out.
            ConfigError: A job is not an :class:`EpisodeJob` (raised the same way).
            Exception: What the ``jobs`` iterator raised (raised the same way); episode
                faults are delivered, not raised.
        """
        self._setup()
        buffer: asyncio.Queue[EpisodeSession | BaseException | None] = asyncio.Queue(maxsize=self.buffer_size)
        slots = asyncio.Semaphore(self.max_in_flight)
        tasks: set[asyncio.Task[None]] = set()
        live_envs: dict[int, tuple[int, EpisodeJob]] = {}  # id of an env object -> the live job playing it
        live_jobs: dict[int, EpisodeJob] = {}  # taken from ``jobs``, not yet handed out or cancelled

        async def run_one(index: int, job: EpisodeJob, env_keys: list[int]) -> None:
            played = handed_out = False
            try:
                try:
                    item: EpisodeSession | BaseException = await self._play_job(index, job)
                except Exception as exc:  # a bug of the scheduler's own: never a silently missing episode
                    item = exc
                played = True
                await buffer.put(item)  # blocks while the consumer's buffer is full: the slot stays taken
                handed_out = True  # to the buffer: counted when the consumer reads it (else cancelled)
            finally:
                for key in env_keys:
                    live_envs.pop(key, None)
                live_jobs.pop(index, None)
                slots.release()
                if not handed_out:  # cancelled with the scheduler
                    await self._cancelled(job, close=not played)

        async def feed() -> None:
            error: Exception | None = None
            try:
                stream = iter(jobs)
                for index in itertools.count():
                    await slots.acquire()  # before the job is drawn: a job taken from ``jobs`` is a job started
                    try:
                        job = next(stream)
                        env_keys = _claim_env(live_envs, index, job)
                    except BaseException:  # StopIteration included
                        slots.release()
                        raise
                    live_jobs[index] = job
                    task = asyncio.get_running_loop().create_task(run_one(index, job, env_keys))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
            except StopIteration:
                pass
            except Exception as exc:  # the jobs iterator failed, or refused a job: the consumer gets it
                error = exc
            for _ in range(self.max_in_flight):  # every started episode handed out first
                await slots.acquire()
            await buffer.put(error)

        feeder = asyncio.get_running_loop().create_task(feed())
        try:
            while True:
                item = await buffer.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                self._count(item)
                yield item
        finally:
            feeder.cancel()
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(feeder, *tasks, return_exceptions=True)
            while not buffer.empty():  # finished, never read: cancelled (their envs closed before the buffer)
                self.stats.cancelled += isinstance(buffer.get_nowait(), EpisodeSession)
            for job in list(live_jobs.values()):  # cancelled before their task ever ran
                await self._cancelled(job, close=True)
            live_jobs.clear()

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
        they finish under the old weights, each within ``request_timeout``; with it, the
        ones still out after ``abort_timeout`` are given up and their episodes fail with
        :class:`~gem_core.errors.GenerateTimeout`), calls ``swap`` (load the new weights,
        within ``swap_timeout``), sets ``engine.policy_version`` (to ``version``, default
        one more) and lets requests flow.

        An async hook is bounded; a sync one runs on the event loop and must be quick.

        Args:
            version: The new version (past the current one); default the current one plus one.
            swap: Loads the new weights (sync or async); ``None`` when the caller did already.
            abort: Makes the engine give up its running requests (answers ``"abort"``, kept
                and resumed under ``EpisodeLimits(max_resumes=...)``).

        Raises:
            PolicyVersionError: ``version`` is not an int past the current version.
            WeightUpdateTimeout: ``abort`` ran past ``abort_timeout`` or ``swap`` past
                ``swap_timeout``; the version did not move (requests flow again).
        """
        self._setup()
        assert self._gate is not None and self._idle is not None and self._update_lock is not None
        async with self._update_lock:
            current = self.engine.policy_version
            if version is None:
                new = current + 1
            elif isinstance(version, bool) or not isinstance(version, int) or version <= current:
                raise PolicyVersionError(
                    f"update_policy(version={version!r}): policy versions only move forward and the engine is at "
                    f"{current}; give an int > {current}, or no version (then it is {current + 1})"
                )
            else:
                new = version
            self._gate.clear()
            try:
                if abort is not None:
                    deadline = asyncio.get_running_loop().time() + self.abort_timeout
                    await self._bounded_hook(abort, "abort", self.abort_timeout, new)
                    await self._drain(deadline, new)
                else:
                    await self._idle.wait()  # each call in flight ends within request_timeout
                if swap is not None:
                    await self._bounded_hook(swap, "swap", self.swap_timeout, new)
                self.engine.policy_version = new
                self.stats.updates += 1
            finally:
                self._gate.set()
                self._kick()
        return new

    async def _bounded_hook(self, hook: Hook, name: str, timeout: float, new: int) -> None:
        """Run an ``update_policy`` hook; an async one at most ``timeout`` seconds."""
        result = hook()
        if not inspect.isawaitable(result):
            return
        running = asyncio.ensure_future(result)
        try:
            done, _ = await asyncio.wait({running}, timeout=timeout)
        except asyncio.CancelledError:
            running.cancel()
            raise
        if not done:
            running.cancel()
            running.add_done_callback(_retrieve)
            raise WeightUpdateTimeout(
                f"update_policy's {name} hook ran past {name}_timeout={timeout:g} s (the update to version {new}); "
                f"it was cancelled and the version stays {self.engine.policy_version}. Raise the scheduler's "
                f"{name}_timeout if it legitimately takes longer"
            )
        running.result()  # the hook's own error propagates

    async def _drain(self, deadline: float, new: int) -> None:
        """Wait until no call is in flight; give up the ones still out at ``deadline`` (they ignored the abort)."""
        assert self._idle is not None
        remaining = deadline - asyncio.get_running_loop().time()
        if self._in_flight and remaining > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._idle.wait(), remaining)
        for call in list(self._in_flight):
            self._give_up(
                call,
                f"it ignored the abort of the weight update to version {new} for abort_timeout="
                f"{self.abort_timeout:g} s; make the engine's abort end its running requests (answer "
                "finish_reason='abort'), or raise abort_timeout",
            )

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
        return session

    def _count(self, session: EpisodeSession) -> None:
        """Count a handed-out episode."""
        self.stats.episodes += 1
        self.stats.turns += len(session.turns)
        self.stats.failed += session.end_reason == "error"
        self.stats.resumed += session.resumes

    async def _cancelled(self, job: EpisodeJob, *, close: bool) -> None:
        """An episode cancelled with the scheduler: counted, and its env closed under ``close_envs``."""
        self.stats.cancelled += 1
        if close and self.close_envs:
            await self._close_env_bounded(job.env)

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

    async def _close_env_bounded(self, env: Env | AsyncEnv) -> None:
        """Close a cancelled episode's env: shielded from a second cancel, at most ``ENV_CLOSE_TIMEOUT`` s."""
        closing = asyncio.ensure_future(self._env_call(env, "close"))
        closing.add_done_callback(_retrieve)
        with contextlib.suppress(asyncio.CancelledError):  # cancelled again while closing: the close goes on alone
            await asyncio.wait({closing}, timeout=ENV_CLOSE_TIMEOUT)

    # ------------------------------------------------------------------ generation

    async def _generate(self, session: EpisodeSession) -> Any:
        """The answer to ``session``'s next request, sent when no weight update is under way."""
        assert self._gate is not None
        while not self._gate.is_set():
            await self._gate.wait()
        if not session.enforce_policy_lag():
            return _STALE
        request = session.request()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.generate is None:
            self._waiting.append((session, request, future))
            self._kick()
        else:
            self._start_call([(session, request, future)], _awaited(self.generate, request), batched=False)
        return await future  # cancelled with the episode: the call is dropped (see _start_call)

    def _start_call(self, entries: list[_Entry], work: Coroutine[Any, Any, Any], *, batched: bool) -> None:
        """Send ``entries``' requests (``work`` runs the engine), bounded by ``request_timeout``."""
        assert self._idle is not None
        loop = asyncio.get_running_loop()
        call = _Call(entries, self.engine.policy_version, batched=batched)
        self._in_flight.add(call)
        self._idle.clear()
        self.stats.generate_calls += 1
        if batched:
            self._batch_calls += 1
        call.task = loop.create_task(work)
        call.task.add_done_callback(lambda task: self._finish_call(call, task))
        call.timer = loop.call_later(
            self.request_timeout,
            self._give_up,
            call,
            f"no answer within request_timeout={self.request_timeout:g} s; raise the scheduler's "
            "request_timeout if replies legitimately take longer, else check the inference engine",
        )
        for _, _, future in entries:  # every episode of the call cancelled (the scheduler is): drop the call
            future.add_done_callback(lambda _: self._drop_if_abandoned(call))

    def _release(self, call: _Call) -> bool:
        """Take ``call`` out of the calls in flight (once); whether it was still in."""
        if call not in self._in_flight:
            return False
        self._in_flight.discard(call)
        if call.timer is not None:
            call.timer.cancel()
        if call.batched:
            self._batch_calls -= 1
        if not self._in_flight:
            assert self._idle is not None
            self._idle.set()
        self._kick()
        return True

    def _give_up(self, call: _Call, why: str) -> None:
        """Cancel ``call`` and fail its episodes with a :class:`GenerateTimeout` naming each."""
        if not self._release(call):
            return
        assert call.task is not None
        call.task.cancel()
        batch = f" (a batched call of {len(call.entries)} requests)" if call.batched else ""
        for session, request, future in call.entries:
            if future.done():
                continue
            self.stats.given_up += 1
            future.set_exception(
                GenerateTimeout(
                    f"episode {session.episode_id} ({describe_request(request)}), request "
                    f"{request.request_id}{batch}: {why}; the request was cancelled and only its episode ended",
                    episodes=[describe_request(request)],
                    request_ids=[request.request_id],
                )
            )

    def _drop_if_abandoned(self, call: _Call) -> None:
        if all(future.cancelled() for _, _, future in call.entries) and self._release(call):
            assert call.task is not None
            call.task.cancel()

    def _finish_call(self, call: _Call, task: asyncio.Task[Any]) -> None:
        """Hand ``call``'s answers (or its error) to its episodes; nothing if it was given up already."""
        error = None if task.cancelled() else task.exception()  # retrieved, even for a call given up
        if call not in self._in_flight:
            return
        entries = call.entries
        try:
            if task.cancelled():  # the request cancelled itself (a given-up call is out of _in_flight)
                names = [describe_request(request) for _, request, _ in entries]
                error = GenerateCancelled(
                    f"generate raised asyncio.CancelledError for request(s) "
                    f"{', '.join(request.request_id for _, request, _ in entries)} (episodes {', '.join(names)}) "
                    "while the scheduler was not cancelled; only these episodes ended. A request the server "
                    "aborted is answered with Generation(finish_reason='abort'), not a CancelledError",
                    episodes=names,
                )
            if error is not None:
                if not isinstance(error, GenerateContractError):  # the engine's own error: say whose it was
                    where = "the batched generate call for episodes" if call.batched else "generate for episode"
                    add_note(error, f"in {where} {_names(entries)}")
                for _, _, future in entries:
                    if not future.done():
                        future.set_exception(error)
                return
            outputs = task.result() if call.batched else [task.result()]
            lowest = min(other.version for other in self._in_flight)
            ids = Counter(o.request_id for o in outputs if isinstance(o, Generation)) if call.batched else None
            for (session, request, future), output in zip(entries, outputs, strict=True):
                if future.done():
                    continue
                problem = None if ids is None else _answer_problem(output, request, ids)
                problem = problem or self._version_problem(output, lowest)
                if problem is None:
                    future.set_result(_stamped(output, call.version))
                else:
                    future.set_exception(
                        GenerateContractError(
                            f"episode {session.episode_id} ({describe_request(request)}), request "
                            f"{request.request_id}: {problem}",
                            episodes=[describe_request(request)],
                        )
                    )
        finally:
            self._release(call)

    def _version_problem(self, output: Any, lowest: int) -> str | None:
        """What is wrong with the version an answer reports: outside [oldest version in flight, current]."""
        reported = getattr(output, "policy_version", None) if isinstance(output, Generation) else None
        try:
            reported = None if reported is None else operator.index(reported)
        except TypeError:
            return None  # not an int at all: the session's check names it
        current = self.engine.policy_version
        if reported is None or lowest <= reported <= current:
            return None
        return (
            f"the answer reports policy_version {reported}, but the requests in flight were sent under versions "
            f"{lowest}..{current} and the engine is at {current}; report the version of the weights that sampled "
            "the tokens (or None: the version the request was sent under)"
        )

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
        batch: list[_Entry] = []
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
        self._start_call(batch, self._call_batch([request for _, request, _ in batch]), batched=True)
        self._kick()  # more requests than max_batch, and room for another call: it goes out too

    async def _call_batch(self, requests: list[TurnRequest]) -> list[Any]:
        assert self.batch_generate is not None
        fn = self.batch_generate
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):  # noqa: B004
            result: Any = await fn(requests)  # type: ignore[misc]
        else:  # a blocking engine: in a thread, so envs step and episodes go on meanwhile
            result = await _in_daemon_thread(fn, requests)
            if inspect.isawaitable(result):
                result = await result
        return check_batch(result, requests, token_mode=self.engine.token_mode)


def _answer_problem(output: Any, request: TurnRequest, ids: Counter[str | None]) -> str | None:
    """A batched call's answer that does not carry its request's id (reordered, duplicated, missing).

    A per-request answer cannot go astray (an id it carries is checked by its session).
    """
    carried = output.request_id if isinstance(output, Generation) else None
    if carried is None:
        return (
            f"the batched generate's answer {type(output).__name__} carries no request_id; a batched generate "
            "returns one Generation per request, in request order, each with request_id=request.request_id "
            "(so answers reordered, duplicated or missing are caught)"
        )
    if carried != request.request_id:
        return (
            f"the batched generate's answer in this request's place carries request id {carried!r}: the answers "
            "are reordered, duplicated or missing; return one answer per request, in request order"
        )
    if ids[carried] > 1:
        return f"the batched generate answered request {carried!r} more than once (duplicated answers)"
    return None


def _names(entries: list[_Entry]) -> str:
    return ", ".join(describe_request(request) for _, request, _ in entries)


def _claim_env(live_envs: dict[int, tuple[int, EpisodeJob]], index: int, job: Any) -> list[int]:
    """Note ``job``'s env (and the env it wraps) as played; refuse one a live job already plays."""
    if not isinstance(job, EpisodeJob):
        raise ConfigError(f"job {index} is {type(job).__name__} {job!r:.80}, not an EpisodeJob(env=..., seed=...)")
    objects = [job.env, getattr(job.env, "unwrapped", job.env)]
    keys = list(dict.fromkeys(id(obj) for obj in objects))
    for key in keys:
        if key in live_envs:
            other_index, other = live_envs[key]
            raise SharedEnvError(
                f"job {index} ({job.env_id or _spec_id(job.env)} seed={job.seed}) uses the env object that live "
                f"job {other_index} ({other.env_id or _spec_id(other.env)} seed={other.seed}) is playing; two "
                "episodes on one env reset and step each other's state. Give each job its own env "
                "(make(env_id) per job); one env may serve jobs one after another"
            )
    for key in keys:
        live_envs[key] = (index, job)
    return keys


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


async def _awaited(generate: AsyncGenerate, request: TurnRequest) -> Any:
    return await generate(request)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a future's exception retrieved (a close or a call whose answer nobody waits for)."""
    if not future.cancelled():
        future.exception()


async def _in_daemon_thread(fn: Callable[[list[TurnRequest]], Any], requests: list[TurnRequest]) -> Any:
    """``fn(requests)`` in a daemon thread: a call given up (hung) keeps only its thread, never the process."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            (future.set_result if ok else future.set_exception)(value)

    def work() -> None:
        try:
            result, ok = fn(requests), True
        except BaseException as exc:  # handed to the loop, where the call's episodes get it
            result, ok = exc, False
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits for this answer
            loop.call_soon_threadsafe(settle, ok, result)

    threading.Thread(target=work, name="gem-rollout-generate", daemon=True).start()
    return await future


def _spec_id(env: Any) -> str | None:
    return getattr(getattr(env, "spec", None), "id", None)
