"""Reset and step cost of every ``game:*`` id, side by side with GEM (``gem-llm``) where it is installed.

Each id plays ``--episodes`` seeded episodes of up to ``--steps`` moves drawn from the env's own
``sample_random_action()``; we report the median reset time, the median step time and, when GEM
is available, GEM's medians for the same id and the ratio. GEM may live in another virtualenv:
``--gem-python PATH`` runs its half in that interpreter (one run, two processes)::

    python bench/games_speed.py [--episodes 20] [--steps 10] [--only Sudoku] [--gem-python .venv-gem/bin/python]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any


def _short(exc: Exception) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # nltk colours its messages
    return re.sub(r"[\s*]+", " ", text).strip()[:70]


def measure(make: Callable[[str], Any], env_id: str, episodes: int, steps: int) -> dict[str, float] | str:
    """Median reset (ms) and step (µs) of one id; a string says why it could not be measured."""
    try:
        env = make(env_id)
    except TimeoutError:
        raise
    except Exception as exc:  # GEM ids that need a download or an extra fail here: report, go on
        return f"make failed: {type(exc).__name__}: {_short(exc)}"
    resets, moves = [], []
    try:
        for seed in range(episodes):
            start = time.perf_counter()
            env.reset(seed=seed)
            resets.append(time.perf_counter() - start)
            for _ in range(steps):
                try:
                    action = env.sample_random_action()
                except NotImplementedError:  # some GEM games have none: time resets only
                    break
                start = time.perf_counter()
                result = env.step(action)
                moves.append(time.perf_counter() - start)
                if result[2] or result[3]:
                    break
    except TimeoutError:
        raise
    except Exception as exc:
        return f"play failed: {type(exc).__name__}: {_short(exc)}"
    out = {"reset_ms": statistics.median(resets) * 1e3}
    if moves:
        out["step_us"] = statistics.median(moves) * 1e6
    return out


def _timed_out(signum: int, frame: object) -> None:
    raise TimeoutError


def worker(side: str, ids: list[str], episodes: int, steps: int, limit_s: int) -> dict[str, Any]:
    if side == "gem":
        import gem  # only in the GEM interpreter

        make: Callable[[str], Any] = gem.make
    else:
        import gem_core

        make = gem_core.make
    # A per-id time limit: some GEM generators can search for minutes (its Sokoban-hard rooms).
    signal.signal(signal.SIGALRM, _timed_out)
    results: dict[str, Any] = {}
    for env_id in ids:
        signal.alarm(limit_s)
        try:
            results[env_id] = measure(make, env_id, episodes, steps)
        except TimeoutError:
            results[env_id] = f"over {limit_s} s for {episodes} episodes"
        finally:
            signal.alarm(0)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--only", default="", help="keep ids containing this text")
    parser.add_argument("--gem-python", default="", help="interpreter with gem-llm installed (default: this one)")
    parser.add_argument("--limit", type=int, default=30, help="seconds allowed per id and side")
    parser.add_argument("--worker", choices=["ours", "gem"], help=argparse.SUPPRESS)
    parser.add_argument("--ids", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        print(json.dumps(worker(args.worker, args.ids.split(","), args.episodes, args.steps, args.limit)))
        return

    import gem_core

    ids = [i for i in gem_core.list_envs(namespace="game") if args.only in i]
    ours = worker("ours", ids, args.episodes, args.steps, args.limit)
    gem_python = args.gem_python or (sys.executable if importlib.util.find_spec("gem") else "")
    theirs: dict[str, Any] = {}
    if gem_python:
        cmd = [gem_python, __file__, "--worker", "gem", "--ids", ",".join(ids)]
        cmd += ["--episodes", str(args.episodes), "--steps", str(args.steps), "--limit", str(args.limit)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode == 0 and lines:
            theirs = json.loads(lines[-1])
        else:
            print(f"(GEM side failed: {proc.stderr.strip()[-300:]})\n")
    else:
        print("(gem-llm not installed: no GEM columns; pass --gem-python to compare)\n")

    print(f"{args.episodes} seeded episodes x up to {args.steps} random moves per id; medians\n")
    header = f"{'id':<34}{'reset ms':>10}{'step us':>9}"
    if theirs:
        header += f"{'GEM reset ms':>14}{'GEM step us':>13}{'reset x':>9}{'step x':>8}"
    print(header)
    for env_id in ids:
        mine = ours[env_id]
        if isinstance(mine, str):
            print(f"{env_id:<34}  {mine}")
            continue
        row = f"{env_id:<34}{mine['reset_ms']:>10.2f}{mine.get('step_us', float('nan')):>9.0f}"
        other = theirs.get(env_id)
        if isinstance(other, dict):
            ratio_reset = other["reset_ms"] / mine["reset_ms"]
            ratio_step = other.get("step_us", float("nan")) / mine.get("step_us", float("nan"))
            row += f"{other['reset_ms']:>14.2f}{other.get('step_us', float('nan')):>13.0f}"
            row += f"{ratio_reset:>9.2f}{ratio_step:>8.2f}"
        elif isinstance(other, str):
            row += f"   GEM: {other}"
        print(row)
    if theirs:
        print("\nx = GEM time / our time (above 1: we are faster). Different generators do different work per")
        print("reset (ours guarantee unique Sudoku solutions and solvable Sokoban rooms), so compare with care.")


if __name__ == "__main__":
    main()
