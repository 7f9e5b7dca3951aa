"""Env-steps per second of gem_core's vector backends, a bare loop, and GEM's ``make_vec``.

Part 1, a cheap env: every column runs the same game (``core:NumberGuess-v0``, gem_core's
cheap reference env) with the same actions and the same per-episode seeds, in SAME_STEP
autoreset (GEM's default), so the columns differ only in the vector machinery:

* ``bare``: a hand-written Python loop over the envs (step; on episode end, reset with
  the next seed). The floor for any vector env.
* ``sync``: ``make_vec(backend="sync")``.
* ``async-inline`` / ``async-thread``: ``backend="async"`` with sync envs on the calling
  thread or in a thread pool.
* ``process``: ``backend="process"``, one worker per CPU (envs spread evenly).
* ``ray``: ``backend="ray"`` on a local Ray instance, one actor per CPU (skipped, with the
  reason, when Ray is not installed).
* ``gem-sync`` / ``gem-async``: GEM's ``make_vec`` (``gem-llm``), when installed, on the same
  env wrapped in GEM's ``Env`` class (it resets with the same seeds, so the env does the
  same work). GEM's async vector env is a thread pool.

Part 2, a CPU-bound env (:class:`BurnEnv`: each step burns a fixed amount of pure-Python
CPU, as a code grader does): ``sync`` against the parallel backends, which should beat it
by about the number of cores.

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

from gem_core.core import Env, ResetReturn, StepReturn
from gem_core.testing import NumberGuessEnv
from gem_core.vector import ProcessVectorEnv, SyncVectorEnv, VectorEnv, episode_seeds, make_vec

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


def steps_for(num_envs: int, budget: int) -> int:
    return max(5, budget // num_envs)


# ---------------------------------------------------------------------------- CPU-bound env


class BurnEnv(Env):
    """Each step burns ``work`` iterations of pure-Python arithmetic (holds the GIL, like a grader)."""

    def __init__(self, work: int = 20_000, episode_length: int = 8) -> None:
        self.work = work
        self.episode_length = episode_length
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        self.t = 0
        return "go", {}

    def step(self, action: str) -> StepReturn:
        acc = 0
        for i in range(self.work):
            acc = (acc * 31 + i) % 1_000_003
        self.t += 1
        return str(acc), 0.0, self.t >= self.episode_length, False, {}


def burn_columns(work: int, cores: int, ray_note: str | None) -> dict[str, Callable[[int], VectorEnv]]:
    fn = functools.partial(BurnEnv, work)
    columns: dict[str, Callable[[int], VectorEnv]] = {
        "sync": lambda n: SyncVectorEnv([fn] * n, autoreset_mode="same_step"),
        "process": lambda n: ProcessVectorEnv([fn] * n, autoreset_mode="same_step", max_processes=cores),
    }
    if ray_note is None:
        from gem_core.vector.ray import RayVectorEnv

        def ray_vec(n: int) -> VectorEnv:
            # an actor serves its envs one at a time and reserves what one needs: one actor per core
            return RayVectorEnv([fn] * n, autoreset_mode="same_step", envs_per_actor=-(-n // cores), num_cpus=1)

        columns["ray"] = ray_vec
    return columns


def run_burn(make: Callable[[], VectorEnv], steps: int) -> Timing:
    vec = make()
    try:
        vec.reset(seed=ROOT_SEED)
        vec.step(["x"] * vec.num_envs)  # warm: workers and actors have imported everything
        start = clock()
        for _ in range(steps):
            vec.step(["x"] * vec.num_envs)
        return since(start)
    finally:
        vec.close()


def start_ray(cores: int) -> str | None:
    """Start a local Ray instance with ``cores`` CPUs; the reason when Ray is unavailable."""
    try:
        import ray
    except ImportError as exc:
        return f"ray columns skipped: {exc}"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # the bench's own module must import in the actors: ship this directory with them
    here = os.path.dirname(os.path.abspath(__file__))
    env_vars = {"PYTHONPATH": os.pathsep.join([here, *sys.path])}
    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env_vars})
    return None


# ---------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,16,64,256", help="comma-separated num_envs (cheap env)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per cell; the median is reported")
    parser.add_argument("--budget", type=int, default=4000, help="env-steps per run (steps = budget / num_envs)")
    parser.add_argument("--no-process", action="store_true", help="skip the worker-process columns")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray columns")
    parser.add_argument("--burn-work", type=int, default=20_000, help="loop iterations per CPU-bound step")
    parser.add_argument("--burn-steps", type=int, default=10, help="batched steps per CPU-bound run")
    parser.add_argument("--quick", action="store_true", help="sizes 1,16, one repeat, small budget")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats, args.budget, args.burn_steps = "1,16", 1, 400, 3
    sizes = [int(s) for s in args.sizes.split(",")]
    cores = os.cpu_count() or 1

    try:
        gem = gem_adapter()
        gem_note = f"gem-llm {importlib.metadata.version('gem-llm')}"
    except Exception as exc:  # not installed, or it fails to import: skip its columns, say why
        gem = None
        gem_note = f"gem-llm columns skipped: {type(exc).__name__}: {exc}"
    ray_note = "ray columns skipped: --no-ray" if args.no_ray else start_ray(cores)

    def ours(**kwargs: Any) -> Callable[[int, list[list[str]]], Timing]:
        return lambda n, a: run_ours(functools.partial(make_vec, ENV_ID, n, autoreset_mode="same_step", **kwargs), a)

    columns: dict[str, Callable[[int, list[list[str]]], Timing]] = {
        "bare": run_bare,
        "sync": ours(),
        "async-inline": ours(backend="async", sync_envs="inline"),
        "async-thread": ours(backend="async"),
    }
    if not args.no_process:
        columns["process"] = ours(backend="process", max_processes=cores)
    if ray_note is None:
        columns["ray"] = lambda n, a: ours(backend="ray", envs_per_actor=-(-n // cores), num_cpus=1)(n, a)
    if gem is not None:
        columns["gem-sync"] = lambda n, a: run_gem(gem, n, False, a)
        columns["gem-async"] = lambda n, a: run_gem(gem, n, True, a)

    print(f"python {sys.version.split()[0]}, {cores} cpus, load average {os.getloadavg()[0]:.1f}; {gem_note}")
    if ray_note is not None:
        print(ray_note)
    print(f"\nPart 1: env {ENV_ID}, SAME_STEP autoreset, median of {args.repeats} runs (columns interleaved)\n")
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

    def table(title: str, rates: dict[tuple[str, int], float], names: list[str], ns: list[int]) -> None:
        print(title)
        print(f"{'num_envs':>8} " + " ".join(f"{name:>13}" for name in names))
        for n in ns:
            print(f"{n:>8} " + " ".join(f"{rates[(name, n)]:>13,.0f}" for name in names))
        print()

    def ratios(rates: dict[tuple[str, int], float], pairs: list[tuple[str, str, str]], ns: list[int]) -> None:
        for a, b, label in pairs:
            if (a, ns[0]) in rates and (b, ns[0]) in rates:
                cells = "  ".join(f"n={n}: {rates[(a, n)] / rates[(b, n)]:.2f}" for n in ns)
                print(f"  {label:<40} {cells}")
        print()

    table("env-steps/s, wall clock (higher is better)", wall, list(columns), sizes)
    print("ratios, wall clock")
    ratios(
        wall,
        [
            ("sync", "bare", "sync / bare (target >= 0.95)"),
            ("async-inline", "bare", "async-inline / bare"),
            ("process", "sync", "process / sync"),
            ("ray", "sync", "ray / sync"),
            ("sync", "gem-sync", "sync / gem-sync (target >= 2)"),
            ("async-inline", "gem-async", "async-inline / gem-async (target > 1)"),
            ("async-thread", "gem-async", "async-thread / gem-async (target >= 1, >= 2 at n >= 64)"),
        ],
        sizes,
    )
    single = [name for name in ("bare", "sync", "async-inline", "gem-sync") if name in columns]
    table("env-steps per CPU-second of the calling thread (single-threaded columns; load-immune)", cpu, single, sizes)
    print("ratios, CPU time")
    ratios(
        cpu,
        [
            ("sync", "bare", "sync / bare (target >= 0.95)"),
            ("async-inline", "bare", "async-inline / bare"),
            ("sync", "gem-sync", "sync / gem-sync (target >= 2)"),
        ],
        sizes,
    )
    # The env's own work (mostly its reset: seeding numpy and stdlib RNGs) is in every column; what
    # a vector env adds is the time per env-step over the bare loop's.
    added = [name for name in ("sync", "async-inline", "gem-sync") if name in columns]
    print("time a vector env adds per env-step over the bare loop, CPU microseconds (lower is better)")
    print(f"{'num_envs':>8} " + " ".join(f"{name:>13}" for name in added))
    for n in sizes:
        extra = [1e6 / cpu[(name, n)] - 1e6 / cpu[("bare", n)] for name in added]
        print(f"{n:>8} " + " ".join(f"{x:>13.2f}" for x in extra))
    print()

    if args.no_process:
        return
    burn = burn_columns(args.burn_work, cores, ray_note)
    burn_sizes = [cores, 4 * cores]
    print(f"Part 2: CPU-bound env (BurnEnv, {args.burn_work} iterations per step), {cores} cores, ")
    print(f"{args.burn_steps} batched steps per run, median of {args.repeats} runs\n")
    burn_rates: dict[tuple[str, int], float] = {}
    for n in burn_sizes:
        burn_samples: dict[str, list[float]] = {name: [] for name in burn}
        for _ in range(args.repeats):
            for name, make in burn.items():
                burn_samples[name].append(run_burn(functools.partial(make, n), args.burn_steps)[0])
        for name in burn:
            burn_rates[(name, n)] = statistics.median(n * args.burn_steps / w for w in burn_samples[name])
    table("env-steps/s, wall clock (higher is better)", burn_rates, list(burn), burn_sizes)
    print(f"ratios, wall clock (ideal: about {cores}, the core count)")
    ratios(burn_rates, [("process", "sync", "process / sync"), ("ray", "sync", "ray / sync")], burn_sizes)


if __name__ == "__main__":
    main()
