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
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from gem_core.testing import NumberGuessEnv
from gem_core.vector import VectorEnv, episode_seed, make_vec

ENV_ID = "core:NumberGuess-v0"
ROOT_SEED = 2026


def action_table(num_envs: int, steps: int) -> list[list[str]]:
    """Deterministic guesses per step and env, built before timing."""
    return [[str((k * 7 + i * 3) % 16 + 1) for i in range(num_envs)] for k in range(steps)]


def seed_stream(env_index: int) -> Iterator[int]:
    k = 0
    while True:
        yield episode_seed(ROOT_SEED, env_index, k)
        k += 1


# ---------------------------------------------------------------------------- runners
# Each returns the elapsed seconds of ``steps`` batched steps (setup and first reset excluded).


def run_bare(num_envs: int, actions: list[list[str]]) -> float:
    envs = [NumberGuessEnv() for _ in range(num_envs)]
    seeds = [seed_stream(i) for i in range(num_envs)]
    for env, stream in zip(envs, seeds, strict=True):
        env.reset(seed=next(stream))
    start = time.perf_counter()
    for row in actions:
        for i, env in enumerate(envs):
            _, _, terminated, truncated, _ = env.step(row[i])
            if terminated or truncated:
                env.reset(seed=next(seeds[i]))
    return time.perf_counter() - start


def run_ours(make: Callable[[], VectorEnv], actions: list[list[str]]) -> float:
    vec = make()
    try:
        vec.reset(seed=ROOT_SEED)
        start = time.perf_counter()
        for row in actions:
            vec.step(row)
        return time.perf_counter() - start
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


def run_gem(gem: Any, num_envs: int, async_mode: bool, actions: list[list[str]]) -> float:
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # GEM prints a line per make_vec
        vec = gem.make_vec(["bench:NumberGuess-v0"] * num_envs, async_mode=async_mode, seed=0)
    vec.reset()
    start = time.perf_counter()
    for row in actions:
        vec.step(row)
    elapsed = time.perf_counter() - start
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
        gem_note = f"gem-llm {getattr(gem, '__version__', '?')}"
    except Exception as exc:  # not installed, or it fails to import: skip its columns, say why
        gem = None
        gem_note = f"gem-llm columns skipped: {type(exc).__name__}: {exc}"

    def ours(**kwargs: Any) -> Callable[[int, list[list[str]]], float]:
        return lambda n, a: run_ours(functools.partial(make_vec, ENV_ID, n, autoreset_mode="same_step", **kwargs), a)

    columns: dict[str, Callable[[int, list[list[str]]], float]] = {
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

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus; {gem_note}")
    print(f"env {ENV_ID}, SAME_STEP autoreset, median of {args.repeats} runs, env-steps/s (higher is better)\n")
    results: dict[tuple[str, int], float] = {}
    for n in sizes:
        actions = action_table(n, steps_for(n, args.budget))
        rates: dict[str, list[float]] = {name: [] for name in columns}
        for _ in range(args.repeats):  # columns interleaved, so load from other processes hits all alike
            for name, run in columns.items():
                rates[name].append(n * len(actions) / run(n, actions))
        for name in columns:
            results[(name, n)] = statistics.median(rates[name])

    header = f"{'num_envs':>8} " + " ".join(f"{name:>13}" for name in columns)
    print(header)
    for n in sizes:
        print(f"{n:>8} " + " ".join(f"{results[(name, n)]:>13,.0f}" for name in columns))

    print("\nratios (median rates)")
    pairs = [("sync", "bare", "sync / bare (1 - overhead; target >= 0.87)")]
    pairs += [("async-inline", "bare", "async-inline / bare"), ("async-thread", "bare", "async-thread / bare")]
    if gem is not None:
        pairs += [
            ("sync", "gem-sync", "sync / gem-sync (target > 1)"),
            ("async-inline", "gem-async", "async-inline / gem-async (target > 1)"),
            ("async-thread", "gem-async", "async-thread / gem-async (target > 1)"),
        ]
    for a, b, label in pairs:
        print(f"  {label:<44} " + "  ".join(f"n={n}: {results[(a, n)] / results[(b, n)]:.2f}" for n in sizes))


if __name__ == "__main__":
    main()
