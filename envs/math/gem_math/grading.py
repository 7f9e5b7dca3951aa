r"""Math answer grading with ``math-verify`` behind one process-wide, timeout-safe worker pool.

Symbolic equivalence checks can hang (huge exponents, pathological LaTeX), so they run
in worker processes and the *parent* enforces the per-answer time limit: a worker that
overruns is killed and replaced. No ``signal.alarm`` is used anywhere on the caller's
side, so grading works from any thread and from asyncio (:meth:`GradingPool.agrade`).

One pool serves the whole process (:func:`get_grading_pool`): every env instance shares
its few workers instead of starting a pool each.

Example:
    >>> from gem_math.grading import grade
    >>> grade("so the answer is \\boxed{\\frac{1}{2}}", "0.5").correct
    True
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import logging
import multiprocessing as mp
import os
import queue
import re
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from multiprocessing.connection import Connection
from typing import Any

from gem_core.errors import ConfigError
from gem_dataset_env.answers import extract_boxed
from gem_math.errors import GradingError

__all__ = [
    "GradeResult",
    "GradingPool",
    "extract_boxed",
    "get_grading_pool",
    "grade",
    "shutdown_grading_pool",
    "verify_math",
]

#: The checker workers run unless told otherwise: ``checker(answer, gold) -> bool``.
DEFAULT_CHECKER = "gem_math.grading:verify_math"
#: Seconds a fresh worker may take to import math-verify and report ready.
_STARTUP_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class GradeResult:
    """The verdict on one answer.

    Attributes:
        correct: The answer is equivalent to the reference.
        answer: The extracted answer text (boxed contents joined by ``", "``), ``None`` if none was found.
        timed_out: Grading ran past its time limit (counted as incorrect).
        error: Why grading failed, if it did (counted as incorrect).
        elapsed_s: Wall-clock seconds spent grading.
    """

    correct: bool
    answer: str | None
    timed_out: bool = False
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def format_error(self) -> bool:
        r"""No ``\boxed{...}`` answer was found in the response."""
        return self.answer is None


def _answer_of(boxed: list[str]) -> str | None:
    """One answer string from all boxes: repeats collapse, distinct boxes form a list ``a, b``."""
    unique = [b for i, b in enumerate(boxed) if b and b not in boxed[:i]]
    return ", ".join(unique) if unique else None


_TRIVIAL_RE = re.compile(r"\s+|\$|\\[,;!: ]|\\(?:left|right)\b|\\displaystyle")


def _normalise(text: str) -> str:
    """Cheap canonical form for the exact-match fast path (never used to say "wrong")."""
    return _TRIVIAL_RE.sub("", text).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")


_NUMBER_RE = re.compile(r"^(-?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?$")
_FRACTION_RE = re.compile(r"^(-?)\\frac\{(-?\d+)\}\{(\d+)\}$|^(-?\d+)/(\d+)$")


def _exact_number(text: str) -> tuple[Fraction, bool] | None:
    r"""``(value, is_integer)`` for plain numbers (``1,000``, ``-2.50``, ``3/4``, ``\frac{3}{4}``), else ``None``."""
    text = _normalise(text)
    match = _NUMBER_RE.match(text)
    if match:
        sign, whole, decimals = match.groups()
        value = Fraction(whole.replace(",", "") + ("." + decimals if decimals else ""))
        return (-value if sign else value), decimals is None
    match = _FRACTION_RE.match(text)
    if match:
        sign, num, den, plain_num, plain_den = match.groups()
        num, den = (num, den) if num is not None else (plain_num, plain_den)
        if int(den) == 0:
            return None
        value = Fraction(int(num), int(den))
        return (-value if sign else value), False
    return None


def _quick_verdict(answer: str, gold: str) -> bool | None:
    """Decide plain-number answers in the parent (no worker round trip); ``None`` when it takes math-verify.

    Equal values are correct; two different integers are wrong. Anything else (decimals close to a
    fraction, expressions, sets) goes to math-verify, whose tolerances this does not second-guess.
    """
    if _normalise(answer) == _normalise(gold):
        return True
    ours, theirs = _exact_number(answer), _exact_number(gold)
    if ours is None or theirs is None:
        return None
    if ours[0] == theirs[0]:
        return True
    if ours[1] and theirs[1]:
        return False
    return None


# ---------------------------------------------------------------------------- worker side


@functools.lru_cache(maxsize=1)
def _extraction_configs() -> Any:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    return [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> Any:
    """Parsed reference, cached: a sampled group grades many answers against the same reference."""
    from math_verify import parse

    # math-verify's own timeouts use signal.alarm; the parent enforces the limit instead.
    return parse(f"${gold}$", extraction_config=_extraction_configs(), parsing_timeout=None)


def verify_math(answer: str, gold: str) -> bool:
    """The default checker (runs in a worker): parse both sides with math-verify and compare."""
    from math_verify import parse, verify

    gold_parsed = _parse_gold(gold)
    if not gold_parsed:  # gold that is not LaTeX (plain words): compare as text
        return _normalise(answer).lower() == _normalise(gold).lower()
    pred_parsed = parse(f"\\boxed{{{answer}}}", extraction_config=_extraction_configs(), parsing_timeout=None)
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


def _worker_main(conn: Connection, checker_path: str) -> None:
    """Worker loop: import the checker once, then answer ``(answer, gold)`` requests until told to stop."""
    try:
        logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns on every call without a timeout
        from gem_core.registry import load_entry_point

        checker = load_entry_point(checker_path)
        if checker_path == DEFAULT_CHECKER:
            # The first parse loads the LaTeX grammar (seconds on a busy machine): do it before
            # reporting ready, so it never counts against an answer's time limit.
            checker("\\frac{1}{2}", "0.5")
    except Exception as exc:  # report instead of dying silently
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        answer, gold = request
        try:
            conn.send((bool(checker(answer, gold)), None))
        except Exception as exc:  # a checker crash is a wrong answer, not a dead worker
            conn.send((False, f"{type(exc).__name__}: {exc}"))


# ---------------------------------------------------------------------------- parent side

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) a process has used, from ``/proc``; ``None`` where unavailable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime (fields 14 and 15)
    except (OSError, IndexError, ValueError):
        return None


class _Worker:
    """One worker process and the parent's end of its pipe."""

    def __init__(self, ctx: Any, checker: str) -> None:
        parent_end, child_end = ctx.Pipe()
        self.conn: Connection = parent_end
        self.process = ctx.Process(target=_worker_main, args=(child_end, checker), daemon=True, name="gem-math-grader")
        self.process.start()
        child_end.close()

    def wait_ready(self, timeout: float) -> None:
        if not self.conn.poll(timeout):
            self.kill()
            raise GradingError(f"math grading worker did not start within {timeout:.0f}s")
        status, detail = self.conn.recv()
        if status != "ready":
            self.kill()
            raise GradingError(f"grading worker failed to start: {detail} (is math-verify installed?)")

    def wait_result(self, cpu_limit: float, wall_limit: float) -> bool:
        """Wait for the worker's answer; ``False`` after ``cpu_limit`` CPU seconds or ``wall_limit`` seconds.

        Counting CPU time rather than wall time keeps verdicts independent of how busy the machine
        is (on a loaded machine a 1 s wall-clock limit fails answers that need 50 ms of work).
        """
        pid = self.process.pid
        assert pid is not None
        cpu_start = _cpu_seconds(pid)
        deadline = time.monotonic() + wall_limit
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if cpu_start is None:  # no /proc: wall clock only
                return self.conn.poll(min(remaining, cpu_limit))
            if self.conn.poll(min(remaining, 0.05)):
                return True
            used = _cpu_seconds(pid)
            if used is not None and used - cpu_start >= cpu_limit:
                return self.conn.poll(0)

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.process.join(timeout=2)
        self.kill()


class GradingPool:
    """A few worker processes that grade answers with math-verify under a per-answer time limit.

    Thread-safe: each call borrows an idle worker (starting one if fewer than ``workers`` run)
    and blocks until one is free. A call whose worker spends more than ``timeout`` CPU seconds
    on it (or ``wall_factor * timeout`` wall seconds) kills the worker, which is replaced in the
    background, and returns ``timed_out=True``.

    Args:
        workers: Maximum worker processes.
        timeout: Default per-answer limit in seconds.
        start_method: ``multiprocessing`` start method; ``"spawn"`` is safe from threaded programs.
        checker: ``"module:function"`` run in the workers as ``checker(answer, gold) -> bool``;
            defaults to math-verify (:func:`verify_math`).
        cache_size: Verdicts remembered per ``(answer, reference)`` (timeouts are not remembered).
        wall_factor: A worker is also stopped after ``wall_factor * timeout`` seconds of wall time
            (the limit itself counts the worker's CPU time, so a busy machine does not fail answers).
    """

    def __init__(
        self,
        workers: int = 2,
        timeout: float = 1.0,
        start_method: str = "spawn",
        checker: str = DEFAULT_CHECKER,
        cache_size: int = 65_536,
        wall_factor: float = 10.0,
    ) -> None:
        if workers < 1:
            raise ConfigError(f"workers must be >= 1, got {workers}")
        if timeout <= 0:
            raise ConfigError(f"timeout must be > 0 seconds, got {timeout}")
        self.workers = workers
        self.timeout = timeout
        self.checker = checker
        self.wall_factor = wall_factor
        self._ctx = mp.get_context(start_method)
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()
        self._running = 0
        self._lock = threading.Lock()
        self._closed = False
        self._executor: ThreadPoolExecutor | None = None
        self._pid = os.getpid()
        # Sampled groups (GRPO) repeat the same final answer many times: remember verdicts.
        self._verdicts: OrderedDict[tuple[str, str], tuple[bool, str | None]] = OrderedDict()
        self.cache_size = cache_size
        self.timeouts = 0  # counters, for benchmarks and monitoring
        self.graded = 0
        self.cache_hits = 0

    # -- worker management
    def _reserve_slot(self) -> bool:
        """Count a worker about to start, if the pool has room for one."""
        with self._lock:
            if self._closed:
                raise GradingError("the grading pool is closed; get_grading_pool() returns a fresh one")
            if self._running < self.workers:
                self._running += 1
                return True
            return False

    def _spawn(self) -> _Worker:
        try:
            return _Worker(self._ctx, self.checker)
        except BaseException:
            with self._lock:
                self._running -= 1
            raise

    def _ready(self, worker: _Worker) -> _Worker:
        try:
            worker.wait_ready(_STARTUP_TIMEOUT_S)
        except BaseException:
            with self._lock:
                self._running -= 1
            raise
        return worker

    def _acquire(self) -> _Worker:
        while True:
            try:
                return self._idle.get_nowait()
            except queue.Empty:
                pass
            if self._reserve_slot():
                return self._ready(self._spawn())
            try:  # all busy: wait, but wake up to take the slot of a worker killed meanwhile
                return self._idle.get(timeout=0.05)
            except queue.Empty:
                continue

    def _release(self, worker: _Worker) -> None:
        with self._lock:
            closed = self._closed
            if not closed:
                self._idle.put(worker)
        if closed:  # a replacement that finished starting after close()
            worker.stop()

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._running -= 1
        # Replace it in the background: a fresh worker takes seconds to import math-verify, and no
        # caller should wait for that while other workers are free.
        threading.Thread(target=self._replace, name="gem-math-grader-respawn", daemon=True).start()

    def _replace(self) -> None:
        try:
            if self._reserve_slot():
                self._release(self._ready(self._spawn()))
        except Exception:  # closed meanwhile, or the start failed: the next caller retries and reports
            return

    def start(self) -> None:
        """Start every worker now instead of on first use (pays the math-verify import up front)."""
        spawned = []
        while self._reserve_slot():
            spawned.append(self._spawn())
        for worker in spawned:  # started together, so the imports overlap
            self._release(self._ready(worker))

    # -- grading
    def verify(self, answer: str, gold: str, *, timeout: float | None = None) -> tuple[bool, bool, str | None]:
        """Compare an extracted answer with the reference in a worker.

        Returns:
            ``(correct, timed_out, error)``.
        """
        key = (answer, gold)
        with self._lock:
            cached = self._verdicts.get(key)
            if cached is not None:
                self._verdicts.move_to_end(key)
                self.cache_hits += 1
                return cached[0], False, cached[1]
        limit = self.timeout if timeout is None else timeout
        worker = self._acquire()
        try:
            worker.conn.send((answer, gold))
            if not worker.wait_result(limit, self.wall_factor * limit):
                self._discard(worker)  # the only way to stop a stuck sympy call
                with self._lock:
                    self.timeouts += 1
                return False, True, f"grading took longer than {limit:g}s of CPU time"
            correct, error = worker.conn.recv()
        except (EOFError, OSError) as exc:  # worker died (OOM killer, segfault)
            self._discard(worker)
            return False, False, f"grading worker died: {type(exc).__name__}"
        except BaseException:
            self._discard(worker)
            raise
        self._release(worker)
        with self._lock:
            self.graded += 1
            if self.cache_size:
                self._verdicts[key] = (bool(correct), error)
                if len(self._verdicts) > self.cache_size:
                    self._verdicts.popitem(last=False)
        return bool(correct), False, error

    def grade(self, response: str, gold: str, *, timeout: float | None = None) -> GradeResult:
        r"""Grade a model response against a reference answer.

        The answer is the content of the response's ``\boxed{}``; repeated boxes count once,
        distinct boxes form a list (so ``\boxed{2}, \boxed{3}`` matches ``2, 3``, not ``3``).

        Args:
            response: The model's full response.
            gold: The reference answer (LaTeX or plain).
            timeout: Per-answer limit in seconds; defaults to the pool's.
        """
        t0 = time.perf_counter()
        answer = _answer_of(extract_boxed(response))
        if answer is None:
            return GradeResult(False, None, elapsed_s=time.perf_counter() - t0)
        quick = _quick_verdict(answer, gold)  # plain numbers need no worker round trip
        if quick is not None:
            return GradeResult(quick, answer, elapsed_s=time.perf_counter() - t0)
        correct, timed_out, error = self.verify(answer, gold, timeout=timeout)
        return GradeResult(correct, answer, timed_out, error, time.perf_counter() - t0)

    async def agrade(self, response: str, gold: str, *, timeout: float | None = None) -> GradeResult:
        """:meth:`grade` for asyncio: waits in a helper thread so the event loop keeps running."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="gem-math-grade")
            executor = self._executor
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, lambda: self.grade(response, gold, timeout=timeout))

    def close(self) -> None:
        """Stop every worker; idempotent. Calls in flight finish or fail with ``GradingError``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)
        if os.getpid() != self._pid:  # inherited through fork: the workers are not ours
            return
        while True:
            try:
                self._idle.get_nowait().stop()
            except queue.Empty:
                break


_POOL: GradingPool | None = None
_POOL_LOCK = threading.Lock()


def _default_workers() -> int:
    env = os.environ.get("GEM_GRADING_WORKERS")
    if env:
        return max(1, int(env))
    return max(1, min(4, os.cpu_count() or 1))


def get_grading_pool() -> GradingPool:
    """The process-wide pool, started lazily; ``GEM_GRADING_WORKERS`` sets its size (default ``min(4, cpus)``)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._closed or _POOL._pid != os.getpid():
            _POOL = GradingPool(workers=_default_workers())
        return _POOL


def shutdown_grading_pool() -> None:
    """Stop the process-wide pool (it restarts on next use)."""
    global _POOL
    with _POOL_LOCK:
        pool, _POOL = _POOL, None
    if pool is not None:
        pool.close()


atexit.register(shutdown_grading_pool)


def grade(response: str, gold: str, *, timeout: float | None = None) -> GradeResult:
    """Grade with the process-wide pool; see :meth:`GradingPool.grade`."""
    return get_grading_pool().grade(response, gold, timeout=timeout)
