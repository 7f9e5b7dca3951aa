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
from collections.abc import Iterator
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
        n = min(MAX_TURN_TOKENS, max(1, int(MEDIAN_TOKENS * math.exp(rng.gauss(0.0, TAIL_SIGMA)))))
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

    def __init__(self, mode: str, server: SimServer, in_flight: int, warmup: int, total: int) -> None:
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
            self.work += sum(map(SimServer.work_s, lengths))
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


async def run_lockstep(clock: Clock, server: SimServer, tokenizer: Any, in_flight: int, total: int) -> Result:
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
    clock: Clock, server: SimServer, tokenizer: Any, in_flight: int, total: int, partial: bool, updates: bool = True
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


async def run_gem(clock: Clock, server: SimServer, in_flight: int, total: int) -> Result:
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


async def run_mode(mode: str, clock: Clock, server: SimServer, tokenizer: Any, in_flight: int, total: int) -> Result:
    if mode == "lockstep":
        return await run_lockstep(clock, server, tokenizer, in_flight, total)
    if mode in ("continuous", "partial", "no-updates"):
        partial, updates = mode == "partial", mode != "no-updates"
        return await run_scheduled(clock, server, tokenizer, in_flight, total, partial, updates)
    if mode == "gem-vec":
        return await run_gem(clock, server, in_flight, total)
    raise SystemExit(f"unknown mode {mode!r}")


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
    parser.add_argument("--quick", action="store_true", help="a smoke run: small, fast")
    args = parser.parse_args(argv)
    if args.quick:
        args.in_flight, args.waves, args.time_scale = "8", 2, 0.002
    SYNC_S = args.sync_s
    from gem_core.testing_tokenizers import build_chat_tokenizer

    tokenizer = build_chat_tokenizer("chatml")
    vocab = range(max(tokenizer.all_special_ids) + 1, min(len(tokenizer), 400))
    modes = args.modes.split(",")
    print(
        f"server: in-flight/{args.oversubscribe} slots, prefill {PREFILL_S}s + {PER_TOKEN_S}s/token, reply tokens "
        f"log-normal (median {MEDIAN_TOKENS}, sigma {TAIL_SIGMA}, cap {MAX_TURN_TOKENS}); envs: game 0s, grader "
        f"0.05-0.5s, tool 0.3-2s a step, 1-6 turns; a {SYNC_S}s weight sync every in-flight episodes; "
        "rates per simulated second"
    )
    print(
        f"{'in flight':>9} {'slots':>5} {'mode':<11} {'turns/s':>8} {'tokens/s':>9} {'GPU idle':>8} "
        f"{'x limit':>8} {'vs lockstep':>11}  note"
    )
    for in_flight in (int(n) for n in args.in_flight.split(",")):
        total = (args.waves or (2 if in_flight <= 64 else 1)) * in_flight
        concurrency = max(1, in_flight // args.oversubscribe)
        base: float | None = None
        for mode in modes:
            clock = Clock(args.time_scale or default_scale(in_flight, mode))
            server = SimServer(clock, concurrency, vocab, int(tokenizer.eos_token_id))
            try:
                result = asyncio.run(run_mode(mode, clock, server, tokenizer, in_flight, total))
            except ImportError as exc:
                print(f"{in_flight:>9} {concurrency:>5} {mode:<11} skipped: {type(exc).__name__}: {exc}")
                continue
            simulated = result.wall_s / clock.scale
            idle = 1 - result.busy_s / (result.concurrency * result.wall_s)
            turns_s = result.turns / simulated
            base = turns_s if mode == "lockstep" else base
            ratio = f"{turns_s / base:.2f}x" if base else "-"
            print(
                f"{in_flight:>9} {concurrency:>5} {mode:<11} {turns_s:>8.2f} {result.tokens / simulated:>9.0f} "
                f"{idle:>8.0%} {simulated / limit_s(result):>7.2f}x {ratio:>11}  {result.note}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
