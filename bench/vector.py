"""Env-steps per second of gem_core's vector envs, a bare loop, and GEM's ``make_vec``.

Every column runs the same game (``core:NumberGuess-v0``, gem_core's cheap reference
env) with the same actions and the same per-episode seeds, in SAME_STEP autoreset
(GEM's default), so the columns differ only in the vector machinery:

* ``bare``: a hand-written Python loop over the envs (step; on episode end, reset with
  the next seed). The floor for any vector env.
* ``sync``: :class:`gem_core.vector.SyncVectorEnv`.
* ``async-inline`` / ``async-thread`` / ``async-process``: :class:`gem_core.vector.AsyncVectorEnv`
  with sync envs on the event loop, in a thread pool, or in worker processes.
* ``gem-sync`` / ``gem-async``: GEM's ``make_vec`` (``gem-llm``), when installed, on the same
  env wrapped in GEM's ``Env`` class (it resets with the same seeds, so the env does the
  same work). GEM's async vector env is a thread pool.

Run: ``python bench/vector.py`` (``--quick`` for a smoke run). Prints medians over
``--repeats`` runs and ratios; it never asserts on timings.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.metadata
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from gem_core.testing import NumberGuessEnv
from gem_core.vector import VectorEnv, episode_seeds, make_vec

ENV_ID = "core:NumberGuess-v0"
ROOT_SEED = 2026


def action_table(num_envs: int, steps: int) -> list[list[str]]:
    """Deterministic guesses per step and env, built before timing."""
    return [[str((k * 7 + i * 3) % 16 + 1) for i in range(num_envs)] for k in range(steps)]


def seed_stream(env_index: int) -> Iterator[int]:
    """The per-episode seeds gem_core's vector envs use, so every column resets identically."""
    return episode_seeds(ROOT_SEED, env_index)


# ---------------------------------------------------------------------------- runners
# Each returns (wall seconds, CPU seconds of the calling thread) for the batched steps
# (setup and first reset excluded). The CPU time is immune to other processes on the
# machine; it is meaningful only for columns that do all their work in the calling thread.


Timing = tuple[float, float]


def clock() -> Timing:
    return time.perf_counter(), time.thread_time()


def since(start: Timing) -> Timing:
    return time.perf_counter() - start[0], time.thread_time() - start[1]


def run_bare(num_envs: int, actions: list[list[str]]) -> Timing:
    envs = [NumberGuessEnv() for _ in range(num_envs)]
    seeds = [seed_stream(i) for i in range(num_envs)]
    for env, stream in zip(envs, seeds, strict=True):
        env.reset(seed=next(stream))
    start = clock()
    for row in actions:
        for i, env in enumerate(envs):
            _, _, terminated, truncated, _ = env.step(row[i])
            if terminated or truncated:
                env.reset(seed=next(seeds[i]))
    return since(start)


def run_ours(make: Callable[[], VectorEnv], actions: list[list[str]]) -> Timing:
    vec = make()
    try:
        vec.reset(seed=ROOT_SEED)
        start = clock()
        for row in actions:
            vec.step(row)
        return since(start)
    finally:
        vec.close()


def gem_adapter() -> Any:
    """GEM's ``Env`` class around the same NumberGuess env, or the reason it is unavailable."""
    import gem
    from gem.core import Env as GemEnv

    class GemNumberGuess(GemEnv):  # type: ignore[misc]
        # GEM's make_vec passes seed=base+index to the constructor and resets without a seed;
        # reset with the same per-episode seeds as gem_core, so both do identical env work.
        def __init__(self, seed: int = 0, **_: Any) -> None:
            self.inner = NumberGuessEnv()
            self.seeds = seed_stream(seed)

        def reset(self, seed: int | None = None) -> Any:
            return self.inner.reset(seed=next(self.seeds))

        def step(self, action: str) -> Any:
            return self.inner.step(action)

    with contextlib.suppress(ValueError):  # registered by an earlier call
        gem.register("bench:NumberGuess-v0", entry_point=GemNumberGuess)
    return gem


def run_gem(gem: Any, num_envs: int, async_mode: bool, actions: list[list[str]]) -> Timing:
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # GEM prints a line per make_vec
        vec = gem.make_vec(["bench:NumberGuess-v0"] * num_envs, async_mode=async_mode, seed=0)
    vec.reset()
    start = clock()
    for row in actions:
        vec.step(row)
    elapsed = since(start)
    pool = getattr(vec, "thread_pool_executer", None)  # GEM's vector envs have no close()
    if pool is not None:
        pool.shutdown(wait=True)
    return elapsed


# ---------------------------------------------------------------------------- main


def steps_for(num_envs: int, budget: int) -> int:
    return max(5, budget // num_envs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,16,64,256", help="comma-separated num_envs")
    parser.add_argument("--repeats", type=int, default=5, help="runs per cell; the median is reported")
    parser.add_argument("--budget", type=int, default=4000, help="env-steps per run (steps = budget / num_envs)")
    parser.add_argument("--no-process", action="store_true", help="skip the worker-process column")
    parser.add_argument("--quick", action="store_true", help="sizes 1,16, one repeat, small budget")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats, args.budget = "1,16", 1, 400
    sizes = [int(s) for s in args.sizes.split(",")]

    try:
        gem = gem_adapter()
        gem_note = f"gem-llm {importlib.metadata.version('gem-llm')}"
    except Exception as exc:  # not installed, or it fails to import: skip its columns, say why
        gem = None
        gem_note = f"gem-llm columns skipped: {type(exc).__name__}: {exc}"

    def ours(**kwargs: Any) -> Callable[[int, list[list[str]]], Timing]:
        return lambda n, a: run_ours(functools.partial(make_vec, ENV_ID, n, autoreset_mode="same_step", **kwargs), a)

    columns: dict[str, Callable[[int, list[list[str]]], Timing]] = {
        "bare": run_bare,
        "sync": ours(),
        "async-inline": ours(vectorization="async", sync_envs="inline"),
        "async-thread": ours(vectorization="async"),
    }
    if not args.no_process:
        columns["async-process"] = ours(vectorization="async", processes=True)
    if gem is not None:
        columns["gem-sync"] = lambda n, a: run_gem(gem, n, False, a)
        columns["gem-async"] = lambda n, a: run_gem(gem, n, True, a)

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}; {gem_note}")
    print(f"env {ENV_ID}, SAME_STEP autoreset, median of {args.repeats} runs (columns interleaved)\n")
    wall: dict[tuple[str, int], float] = {}
    cpu: dict[tuple[str, int], float] = {}
    for n in sizes:
        actions = action_table(n, steps_for(n, args.budget))
        samples: dict[str, list[Timing]] = {name: [] for name in columns}
        for _ in range(args.repeats):  # interleaved, so load from other processes hits all columns alike
            for name, run in columns.items():
                samples[name].append(run(n, actions))
        work = n * len(actions)
        for name in columns:
            wall[(name, n)] = statistics.median(work / w for w, _ in samples[name])
            cpu[(name, n)] = statistics.median(work / max(c, 1e-9) for _, c in samples[name])

    def table(title: str, rates: dict[tuple[str, int], float], names: list[str]) -> None:
        print(title)
        print(f"{'num_envs':>8} " + " ".join(f"{name:>13}" for name in names))
        for n in sizes:
            print(f"{n:>8} " + " ".join(f"{rates[(name, n)]:>13,.0f}" for name in names))
        print()

    def ratios(rates: dict[tuple[str, int], float], pairs: list[tuple[str, str, str]]) -> None:
        for a, b, label in pairs:
            if (a, sizes[0]) in rates and (b, sizes[0]) in rates:
                cells = "  ".join(f"n={n}: {rates[(a, n)] / rates[(b, n)]:.2f}" for n in sizes)
                print(f"  {label:<40} {cells}")
        print()

    table("env-steps/s, wall clock (higher is better)", wall, list(columns))
    print("ratios, wall clock")
    ratios(
        wall,
        [
            ("sync", "bare", "sync / bare (target >= 0.87)"),
            ("async-inline", "bare", "async-inline / bare"),
            ("sync", "gem-sync", "sync / gem-sync (target > 1)"),
            ("async-inline", "gem-async", "async-inline / gem-async (target > 1)"),
            ("async-thread", "gem-async", "async-thread / gem-async (target > 1)"),
        ],
    )
    single = [name for name in ("bare", "sync", "async-inline", "gem-sync") if name in columns]
    table("env-steps per CPU-second of the calling thread (single-threaded columns; load-immune)", cpu, single)
    print("ratios, CPU time")
    ratios(
        cpu,
        [
            ("sync", "bare", "sync / bare (target >= 0.87)"),
            ("async-inline", "bare", "async-inline / bare"),
            ("sync", "gem-sync", "sync / gem-sync (target > 1)"),
        ],
    )


if __name__ == "__main__":
    main()
