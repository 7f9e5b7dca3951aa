"""GEM's discount study (arXiv 2510.01051, Fig. 5a) on the CPU: does a lower gamma learn shorter episodes?

GuessTheNumber from 1 to 50 with a 50-turn budget (``game:GuessTheNumber-v0-hard`` with
``max_turns=50``, the paper's setting), REINFORCE with ReBN, for several gammas and seeds.
Episodes are played by the project's own :class:`gem_core.runner.EpisodeRunner` (so by the
episode engine) and the advantages are :func:`gem_core.rl.rebn_advantages`.

The policy is the smallest that can learn the task here: a **tabular softmax policy over a
featurisation of the observation text**. The feature is the size of the interval the hints
leave open (parsed from "Guesses so far: 25 (secret is lower), ..."), bucketed by
``ceil(log2(size))``; the action is one of 11 positions in that interval (0 = its low end,
10 = its high end, 5 = its middle), written as ``position 5: \\boxed{25}``. A bisection is one
action among 11 and a linear scan another, so the study measures which one each gamma
prefers. Why not a tiny transformer: from random weights it would first have to learn to
read the hints, which takes far more episodes than a CPU study affords (see the TRL demo);
the discount only changes which *legal* strategy is preferred, which this policy isolates.

    python bench/discount_study.py                       # gammas 1.0, 0.9, 0.5; 4 seeds
    python bench/discount_study.py --iterations 5 --seeds 1 --out /tmp/study
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gem_core.rl.advantages import rebn_advantages
from gem_core.rl.types import Episode
from gem_core.runner import EpisodeRunner

ENV_ID = "game:GuessTheNumber-v0-hard"
POSITIONS = 11  # actions: interval positions 0/10 .. 10/10
_RANGE = re.compile(r"from (-?\d+) to (-?\d+)")
_HINT = re.compile(r"(-?\d+) \(secret is (higher|lower)\)")
_POSITION = re.compile(r"position (\d+):")


def open_interval(observation: str) -> tuple[int, int]:
    """The interval the hints in a GuessTheNumber observation leave open."""
    found = _RANGE.search(observation)
    if found is None:
        raise ValueError(f"no 'from LOW to HIGH' in the observation: {observation[:80]!r}")
    low, high = int(found[1]), int(found[2])
    for guess, hint in _HINT.findall(observation):
        if hint == "higher":
            low = max(low, int(guess) + 1)
        else:
            high = min(high, int(guess) - 1)
    return low, max(low, high)


def feature(observation: str) -> int:
    """The policy's state: ``ceil(log2(size of the open interval))``."""
    low, high = open_interval(observation)
    return math.ceil(math.log2(high - low + 1))


@dataclass
class TabularPolicy:
    """Softmax over interval positions, one row of logits per feature value."""

    logits: np.ndarray
    rng: np.random.Generator

    @classmethod
    def uniform(cls, features: int, seed: int) -> TabularPolicy:
        return cls(np.zeros((features, POSITIONS)), np.random.default_rng(seed))

    def probabilities(self, state: int) -> np.ndarray:
        z = np.exp(self.logits[state] - self.logits[state].max())
        return z / z.sum()

    async def __call__(self, messages: list[dict[str, str]]) -> str:
        observation = messages[-1]["content"]
        low, high = open_interval(observation)
        position = int(self.rng.choice(POSITIONS, p=self.probabilities(feature(observation))))
        guess = low + round(position * (high - low) / (POSITIONS - 1))
        return f"position {position}: \\boxed{{{guess}}}"

    def update(self, episodes: list[Episode], gamma: float, learning_rate: float) -> None:
        """One REINFORCE step with ReBN advantages (mean over the batch's turns)."""
        advantages = rebn_advantages(episodes, gamma)
        gradient = np.zeros_like(self.logits)
        count = 0
        for episode, episode_advantages in zip(episodes, advantages, strict=True):
            for turn, advantage in zip(episode.turns, episode_advantages, strict=True):
                state = feature(turn.observation)
                position = int(_POSITION.search(turn.action)[1])  # type: ignore[index]
                score = -self.probabilities(state)
                score[position] += 1.0  # d log pi(position | state) / d logits[state]
                gradient[state] += advantage * score
                count += 1
        self.logits += learning_rate * gradient / max(count, 1)


def train(
    gamma: float, seed: int, *, iterations: int, batch: int, learning_rate: float, high: int, max_turns: int
) -> list[dict[str, float]]:
    """Train one policy; returns per-iteration mean turns and success."""
    policy = TabularPolicy.uniform(math.ceil(math.log2(high)) + 1, seed)

    async def run() -> list[dict[str, float]]:
        history = []
        async with EpisodeRunner(
            ENV_ID,
            policy=policy,
            env_kwargs={"low": 1, "high": high, "max_turns": max_turns},
            max_in_flight=batch,
            seed=seed,
            sync_envs="inline",
        ) as runner:
            for iteration in range(iterations):
                episodes = await runner.collect(batch)
                history.append(
                    {
                        "iteration": iteration,
                        "turns": float(np.mean([e.num_turns for e in episodes])),
                        "success": float(np.mean([bool(e.turns[-1].info.get("success")) for e in episodes])),
                    }
                )
                policy.update(episodes, gamma, learning_rate)
        return history

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gammas", type=float, nargs="+", default=[1.0, 0.9, 0.5])
    parser.add_argument("--seeds", type=int, default=4, help="independent runs per gamma")
    parser.add_argument("--iterations", type=int, default=100, help="REINFORCE steps per run")
    parser.add_argument("--batch", type=int, default=32, help="episodes per step")
    parser.add_argument("--lr", type=float, default=20.0, help="step size on the logits")
    parser.add_argument("--high", type=int, default=50, help="secret drawn from 1..HIGH")
    parser.add_argument("--max-turns", type=int, default=50)
    parser.add_argument("--out", default="runs/discount_study", help="table, JSON and plot go here")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    curves: dict[float, np.ndarray] = {}
    rows: dict[str, dict[str, float]] = {}
    tail = max(1, args.iterations // 10)
    for gamma in args.gammas:
        runs = [
            train(
                gamma,
                seed,
                iterations=args.iterations,
                batch=args.batch,
                learning_rate=args.lr,
                high=args.high,
                max_turns=args.max_turns,
            )
            for seed in range(args.seeds)
        ]
        turns = np.array([[h["turns"] for h in run] for run in runs])
        success = np.array([[h["success"] for h in run] for run in runs])
        curves[gamma] = turns
        final_turns = turns[:, -tail:].mean(axis=1)
        rows[str(gamma)] = {
            "turns_start": float(turns[:, :tail].mean()),
            "turns_end": float(final_turns.mean()),
            "turns_end_std": float(final_turns.std()),
            "success_end": float(success[:, -tail:].mean()),
        }

    header = (
        f"| gamma | turns, first {tail} steps | turns, last {tail} steps (mean ± sd over {args.seeds} seeds) "
        f"| success, last {tail} steps |"
    )
    lines = [header, "|---|---|---|---|"]
    for gamma, row in rows.items():
        lines.append(
            f"| {gamma} | {row['turns_start']:.2f} | {row['turns_end']:.2f} ± {row['turns_end_std']:.2f} "
            f"| {row['success_end']:.2f} |"
        )
    table = "\n".join(lines)
    print(table)
    (out / "discount_study.md").write_text(table + "\n")
    (out / "discount_study.json").write_text(json.dumps({"args": vars(args), "results": rows}, indent=2))
    plot_path = _plot(curves, out / "discount_study.png", args.high)
    print(f"wrote {out / 'discount_study.md'}, .json and {plot_path} ({time.perf_counter() - started:.1f}s)")
    return rows


def _plot(curves: dict[float, np.ndarray], path: Path, high: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.5, 3.8))
    for gamma, turns in curves.items():
        mean = turns.mean(axis=0)
        axis.plot(np.arange(1, len(mean) + 1), mean, label=f"gamma = {gamma}")
        axis.fill_between(np.arange(1, len(mean) + 1), turns.min(axis=0), turns.max(axis=0), alpha=0.15)
    axis.axhline(math.log2(high), color="grey", linestyle=":", label=f"log2({high})")
    axis.set_xlabel("REINFORCE + ReBN step")
    axis.set_ylabel("mean turns per episode")
    axis.set_title(f"GuessTheNumber 1-{high}: turns to solve per gamma")
    axis.legend()
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


if __name__ == "__main__":
    main()
