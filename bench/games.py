"""Speed of the ``game:*`` envs: ``reset``, one ``step``, and a whole expert episode.

For every registered ``game:`` id: the median ``reset(seed=s)`` time over seeds, the median ``step`` time
of random well-formed moves, and the median time, turns and return of an episode played by the game's
``expert_action()``. When GEM (``gem-llm``) is importable, the same ids are made with ``gem.make`` and
their ``reset`` / random ``step`` are timed in the same run, side by side, with the ratio GEM / ours.

    python bench/games.py [--seeds 20] [--ids game:Sudoku-v0-easy ...]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import signal
import statistics
import time
from collections.abc import Callable
from typing import Any

import gem_core


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def time_env(make: Callable[[], Any], seeds: int) -> tuple[float, float]:
    """Median reset and step times (microseconds) over ``seeds`` episodes of up to 10 random moves."""
    env = make()
    resets, steps = [], []
    for seed in range(seeds):
        start = time.perf_counter()
        env.reset(seed=seed)
        resets.append(time.perf_counter() - start)
        for _ in range(10):
            try:
                action = env.sample_random_action()
            except NotImplementedError:  # GEM's Sudoku and TowerofHanoi have none: time resets only
                break
            start = time.perf_counter()
            result = env.step(action)
            steps.append(time.perf_counter() - start)
            if result[2] or result[3]:
                break
    return median_us(resets), median_us(steps) if steps else float("nan")


def time_expert(env_id: str, seeds: int) -> tuple[float, float, float]:
    """Median wall time (ms), turns and return of expert episodes."""
    env = gem_core.make(env_id)
    times, turns, returns = [], [], []
    for seed in range(seeds):
        start = time.perf_counter()
        env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.expert_action())  # type: ignore[union-attr]
            total += reward
            done = terminated or truncated
        times.append(time.perf_counter() - start)
        turns.append(env.turn)  # type: ignore[union-attr]
        returns.append(total)
    return statistics.median(times) * 1e3, statistics.median(turns), statistics.mean(returns)


def _over_time(signum: int, frame: object) -> None:
    raise TimeoutError


def gem_maker(env_id: str) -> Callable[[], Any] | None:
    """A factory for GEM's env of the same id, or ``None`` when GEM is missing or cannot build it offline."""
    if importlib.util.find_spec("gem") is None:
        return None
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            import gem  # type: ignore[import-not-found]

            gem.make(env_id).reset(seed=0)
    except TimeoutError:
        raise
    except Exception:  # GEM's Wordle/Hangman download nltk data; offline they fail
        return None
    return lambda: gem.make(env_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--expert-seeds", type=int, default=5)
    parser.add_argument("--ids", nargs="*", default=None)
    parser.add_argument("--gem-limit", type=int, default=60, help="seconds allowed for GEM's timing of one id")
    args = parser.parse_args()
    ids = args.ids or gem_core.list_envs(namespace="game")
    have_gem = importlib.util.find_spec("gem") is not None
    if not have_gem:
        print("(gem-llm not installed: no GEM columns; `pip install gem-llm` to compare)\n")
    header = f"{'id':<34}{'reset us':>10}{'step us':>9}{'expert ms':>11}{'turns':>7}{'return':>8}"
    if have_gem:
        header += f"{'GEM reset':>11}{'GEM step':>10}{'ratio r/s':>12}"
    print(f"seeds: {args.seeds} (timing), {args.expert_seeds} (expert); medians\n{header}")
    for env_id in ids:
        reset_us, step_us = time_env(lambda env_id=env_id: gem_core.make(env_id), args.seeds)
        expert_ms, turns, ret = time_expert(env_id, args.expert_seeds)
        line = f"{env_id:<34}{reset_us:>10.0f}{step_us:>9.0f}{expert_ms:>11.1f}{turns:>7.0f}{ret:>8.2f}"
        if have_gem:
            # GEM's Sokoban generator can search for minutes (hard, random): give each id a time limit.
            signal.signal(signal.SIGALRM, _over_time)
            signal.alarm(args.gem_limit)
            try:
                maker = gem_maker(env_id)
                if maker is None:
                    line += f"{'n/a':>11}{'n/a':>10}"
                else:
                    with contextlib.redirect_stdout(io.StringIO()):
                        gem_reset, gem_step = time_env(maker, args.seeds)
                    line += f"{gem_reset:>11.0f}{gem_step:>10.0f}"
                    line += f"{gem_reset / reset_us:>6.1f}/{gem_step / step_us:<5.1f}"
            except TimeoutError:
                line += f"  GEM: over {args.gem_limit} s"
            finally:
                signal.alarm(0)
        print(line)


if __name__ == "__main__":
    main()
