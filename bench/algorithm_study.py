"""GEM's algorithm comparison (arXiv 2510.01051, Tables 1-2) on the CPU: ReBN against GRPO, RLOO, REINFORCE and PPO.

Every method trains the same small policy on the same episodes budget: a **tabular softmax policy
over a featurisation of the observation text** (as in ``bench/discount_study.py``), playing episodes
through the project's :class:`gem_core.runner.EpisodeRunner` in groups of ``--group`` episodes from one
start state (so GRPO, Dr. GRPO and RLOO have their groups), and scoring turns with the estimators of
:mod:`gem_core.rl.advantages`:

* ``rebn`` (REINFORCE with return batch normalisation), ``reinforce`` (raw returns, no baseline),
  ``grpo``, ``dr_grpo``, ``rloo`` (episode-level: every turn gets its episode's score), and
  ``reinforce_pp`` (token-level REINFORCE++; one action is one "token" here, so it is ReBN with a
  Bessel-corrected std: it is run to show exactly that);
* ``ppo``: a clipped surrogate over several epochs with a learned tabular value baseline over the same
  features and GAE (``--gae-lambda``), advantages normalised over the batch.

The games and their reward shapes (features chosen so a table can learn each in seconds):

* ``guess``: GuessTheNumber 1-50, 7 turns, sparse terminal reward. State: ``ceil(log2)`` of the
  interval the hints leave open; action: one of 11 positions in it (the discount study's policy).
* ``hanoi``: TowerofHanoi with 3 disks and 20 turns, sparse terminal reward after 7 moves at best
  (with 4 disks no method reached a success within the budget). State: which peg each disk is on;
  action: one of the 6 peg pairs.
* ``hangman``: Hangman, 3 letters, 18 turns, dense per-turn rewards (every revealed letter pays).
  One state; action: one of the 26 letters not guessed yet (the policy learns which letters pay).
* ``2048``: Game2048 to 64 in 50 turns, dense per-turn rewards (log progress of the largest tile),
  long horizon. State: the cell of the largest tile; action: one of the directions that move a tile
  (computed with the game's own ``slide``).

    python bench/algorithm_study.py                      # 4 games x 7 methods x 4 seeds
    python bench/algorithm_study.py --games guess --methods rebn grpo --seeds 1 --iterations 3 --no-plot
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gem_games.game_2048 import slide

from gem_core.rl.advantages import (
    dr_grpo_advantages,
    grpo_advantages,
    rebn_advantages,
    reinforce_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
)
from gem_core.rl.types import Episode
from gem_core.runner import EpisodeRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from discount_study import feature as interval_feature  # a sibling script, not a package
from discount_study import open_interval

_ACTION = re.compile(r"^a(\d+):")
_PEG = re.compile(r"^([ABC]): \[([0-9, ]*)\]", re.MULTILINE)
_GUESSED = re.compile(r"Letters guessed: (.*)")
_ROW = re.compile(r"^\|(.*)\|$", re.MULTILINE)
LETTERS = "etaoinshrdlcumwfgypbvkjxqz"
HANOI_PAIRS = ("A B", "A C", "B A", "B C", "C A", "C B")
DIRECTIONS = ("up", "down", "left", "right")


@dataclass(frozen=True)
class Game:
    """A game id, its kwargs, and the featurisation a tabular policy plays it with."""

    name: str
    env_id: str
    env_kwargs: dict[str, Any]
    shape: str
    actions: int
    state: Callable[[str], Hashable]
    move: Callable[[int, str], str]
    threshold: float  # success rate that counts as "learned" for the episodes-to-threshold column
    legal: Callable[[str], np.ndarray] | None = None  # actions the policy may pick here; None: all


def _guess_move(position: int, observation: str) -> str:
    low, high = open_interval(observation)
    return str(low + round(position * (high - low) / 10))


def hanoi_state(observation: str) -> Hashable:
    """The peg of every disk, smallest first (the last board in the text wins)."""
    where: dict[int, str] = {}
    for peg, disks in _PEG.findall(observation):
        for disk in disks.replace(",", " ").split():
            where[int(disk)] = peg
    return tuple(where[d] for d in sorted(where))


def unguessed_letters(observation: str) -> np.ndarray:
    """Mask of the letters not guessed yet (a repeated letter only wastes a turn)."""
    found = _GUESSED.findall(observation)
    guessed = set() if not found or found[-1].strip() == "none" else set(found[-1].lower().replace(",", " ").split())
    return np.array([letter not in guessed for letter in LETTERS])


def board(observation: str) -> list[list[int]]:
    """The last 4x4 2048 board in the text, 0 for an empty cell."""
    return [[int(c) if c.strip().isdigit() else 0 for c in row.split("|")] for row in _ROW.findall(observation)[-4:]]


def largest_tile_cell(observation: str) -> Hashable:
    """Index (row * 4 + col) of the largest tile on the board."""
    return int(np.argmax(board(observation)))


def sliding_directions(observation: str) -> np.ndarray:
    """Mask of the directions that change the board (a slide that changes nothing only wastes a turn)."""
    grid = board(observation)
    legal = np.array([slide(grid, direction)[0] != grid for direction in DIRECTIONS])
    return legal if legal.any() else np.ones(len(DIRECTIONS), dtype=bool)


GAMES = {
    "guess": Game(
        "guess",
        "game:GuessTheNumber-v0-hard",
        {},
        "sparse terminal, 7 turns",
        11,
        interval_feature,
        _guess_move,
        0.9,
    ),
    "hanoi": Game(
        "hanoi",
        "game:TowerofHanoi-v0-easy",
        {"num_disks": 3, "max_turns": 20},
        "sparse terminal, 7+ moves",
        len(HANOI_PAIRS),
        hanoi_state,
        lambda a, _: HANOI_PAIRS[a],
        0.5,
    ),
    "hangman": Game(
        "hangman",
        "game:Hangman-v0-easy",
        {"max_turns": 18},
        "dense per turn, 18 turns",
        len(LETTERS),
        lambda _: 0,
        lambda a, _: LETTERS[a],
        0.5,
        unguessed_letters,
    ),
    "2048": Game(
        "2048",
        "game:Game2048-v0-easy",
        {},
        "dense per turn, long (50 turns)",
        len(DIRECTIONS),
        largest_tile_cell,
        lambda a, _: DIRECTIONS[a],
        0.5,
        sliding_directions,
    ),
}


@dataclass
class TabularPolicy:
    """Softmax over a game's actions, one row of logits per state; unseen states start uniform."""

    game: Game
    rng: np.random.Generator
    logits: dict[Hashable, np.ndarray] = field(default_factory=dict)

    def row(self, state: Hashable) -> np.ndarray:
        if state not in self.logits:
            self.logits[state] = np.zeros(self.game.actions)
        return self.logits[state]

    def probabilities(self, state: Hashable, legal: np.ndarray | None = None) -> np.ndarray:
        logits = self.row(state) if legal is None else np.where(legal, self.row(state), -np.inf)
        z = np.exp(logits - logits.max())
        return z / z.sum()

    def legal(self, observation: str) -> np.ndarray | None:
        return None if self.game.legal is None else self.game.legal(observation)

    async def __call__(self, messages: list[dict[str, str]]) -> str:
        observation = messages[-1]["content"]
        p = self.probabilities(self.game.state(observation), self.legal(observation))
        action = int(self.rng.choice(self.game.actions, p=p))
        return f"a{action}: \\boxed{{{self.game.move(action, observation)}}}"


@dataclass
class Samples:
    """Every turn of a batch, in episode order: its state, legal-action mask and action index."""

    states: list[Hashable]
    legal: list[np.ndarray | None]
    actions: np.ndarray

    @classmethod
    def of(cls, policy: TabularPolicy, episodes: list[Episode]) -> Samples:
        turns = [turn for episode in episodes for turn in episode.turns]
        return cls(
            [policy.game.state(turn.observation) for turn in turns],
            [policy.legal(turn.observation) for turn in turns],
            np.array([int(_ACTION.match(turn.action)[1]) for turn in turns]),  # type: ignore[index]
        )

    def probabilities(self, policy: TabularPolicy) -> np.ndarray:
        """The policy's probability of each taken action, now."""
        return np.array(
            [policy.probabilities(s, m)[a] for s, m, a in zip(self.states, self.legal, self.actions, strict=True)]
        )


def estimator_advantages(method: str, episodes: list[Episode], gamma: float) -> np.ndarray:
    """Per-turn advantages of ``method`` from :mod:`gem_core.rl.advantages`, flattened in episode order."""
    if method == "rebn":
        parts = rebn_advantages(episodes, gamma)
    elif method == "reinforce":
        parts = reinforce_advantages(episodes, gamma)
    elif method == "grpo":
        parts = grpo_advantages(episodes, gamma=gamma)
    elif method == "dr_grpo":
        parts = dr_grpo_advantages(episodes, gamma=gamma)
    elif method == "rloo":
        parts = rloo_advantages(episodes, gamma=gamma)
    elif method == "reinforce_pp":
        # One action = one generated token, all tokens generated: token-level returns are turn-level ones.
        parts = reinforce_pp_advantages(
            [e.rewards for e in episodes], [np.ones(e.num_turns) for e in episodes], gamma=gamma
        )
    else:
        raise ValueError(f"unknown method {method!r}")
    return np.concatenate(parts)


def policy_gradient_step(policy: TabularPolicy, batch: Samples, weights: np.ndarray, lr: float) -> None:
    """``logits += lr * mean_turns(weight * d log pi(a|s) / d logits)`` (a constant normaliser, as Dr. GRPO)."""
    gradients: dict[Hashable, np.ndarray] = {}
    for state, legal, action, weight in zip(batch.states, batch.legal, batch.actions, weights, strict=True):
        score = -policy.probabilities(state, legal)
        score[action] += 1.0
        gradients[state] = gradients.get(state, 0.0) + weight * score
    for state, gradient in gradients.items():
        policy.row(state)[...] += lr * gradient / max(len(batch.states), 1)


@dataclass
class ValueTable:
    """A tabular state-value baseline for PPO, moved toward its targets by ``lr``."""

    values: dict[Hashable, float] = field(default_factory=dict)

    def __call__(self, state: Hashable) -> float:
        return self.values.get(state, 0.0)

    def fit(self, states: list[Hashable], targets: np.ndarray, lr: float) -> None:
        sums: dict[Hashable, list[float]] = {}
        for state, target in zip(states, targets, strict=True):
            sums.setdefault(state, []).append(float(target))
        for state, group in sums.items():
            self.values[state] = self(state) + lr * (float(np.mean(group)) - self(state))


def gae(episodes: list[Episode], game: Game, value: ValueTable, gamma: float, lam: float) -> tuple[np.ndarray, ...]:
    """GAE advantages and value targets per turn; an episode's end (won, lost or out of turns) bootstraps 0."""
    advantages, targets = [], []
    for episode in episodes:
        values = [value(game.state(turn.observation)) for turn in episode.turns]
        running = 0.0
        episode_advantages = np.zeros(episode.num_turns)
        for t in range(episode.num_turns - 1, -1, -1):
            following = values[t + 1] if t + 1 < episode.num_turns else 0.0
            delta = episode.turns[t].reward + gamma * following - values[t]
            running = delta + gamma * lam * running
            episode_advantages[t] = running
        advantages.append(episode_advantages)
        targets.append(episode_advantages + np.array(values))
    return np.concatenate(advantages), np.concatenate(targets)


def ppo_step(
    policy: TabularPolicy,
    value: ValueTable,
    episodes: list[Episode],
    *,
    gamma: float,
    lam: float,
    lr: float,
    epochs: int = 4,
    clip: float = 0.2,
    value_lr: float = 0.5,
) -> None:
    """PPO-clip on the logits: ``epochs`` passes of the clipped surrogate, then one fit of the value table."""
    batch = Samples.of(policy, episodes)
    advantages, targets = gae(episodes, policy.game, value, gamma, lam)
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    old = batch.probabilities(policy)
    for _ in range(epochs):
        ratio = batch.probabilities(policy) / old
        # The clipped term has no gradient where it is the active (smaller) one.
        active = np.where(advantages >= 0, ratio < 1 + clip, ratio > 1 - clip)
        policy_gradient_step(policy, batch, np.where(active, advantages * ratio, 0.0), lr)
    value.fit(batch.states, targets, value_lr)


METHODS = ("rebn", "grpo", "dr_grpo", "rloo", "reinforce", "reinforce_pp", "ppo")


def train(
    game: Game, method: str, seed: int, *, iterations: int, batch: int, group: int, lr: float, gamma: float, lam: float
) -> dict[str, list[float]]:
    """One run: per-iteration success rate and mean return of the batch the policy just played."""
    policy = TabularPolicy(game, np.random.default_rng(seed))
    value = ValueTable()

    async def run() -> dict[str, list[float]]:
        history: dict[str, list[float]] = {"success": [], "return": []}
        async with EpisodeRunner(
            game.env_id,
            policy=policy,
            env_kwargs=game.env_kwargs,
            max_in_flight=batch,
            seed=seed,
            group_size=group,
            sync_envs="inline",
        ) as runner:
            for _ in range(iterations):
                episodes = await runner.collect(batch)
                history["success"].append(float(np.mean([bool(e.turns[-1].info.get("success")) for e in episodes])))
                history["return"].append(float(np.mean([e.total_reward for e in episodes])))
                if method == "ppo":
                    ppo_step(policy, value, episodes, gamma=gamma, lam=lam, lr=lr)
                else:
                    advantages = estimator_advantages(method, episodes, gamma)
                    policy_gradient_step(policy, Samples.of(policy, episodes), advantages, lr)
        return history

    return asyncio.run(run())


def episodes_to_threshold(success: np.ndarray, threshold: float, batch: int, window: int) -> float:
    """Episodes played until the success rate, averaged over ``window`` steps, first reaches ``threshold``."""
    smoothed = np.convolve(success, np.ones(window) / window, mode="valid")
    hits = np.flatnonzero(smoothed >= threshold)
    return float((hits[0] + window) * batch) if hits.size else math.inf


def summarise(game: Game, runs: list[dict[str, list[float]]], batch: int, tail: int) -> dict[str, Any]:
    success = np.array([run["success"] for run in runs])
    returns = np.array([run["return"] for run in runs])
    final_success = success[:, -tail:].mean(axis=1)
    final_return = returns[:, -tail:].mean(axis=1)
    reached = [episodes_to_threshold(s, game.threshold, batch, tail) for s in success]
    finite = [r for r in reached if math.isfinite(r)]
    return {
        "success_start": float(success[:, :tail].mean()),
        "success": float(final_success.mean()),
        "success_sd": float(final_success.std()),
        "return": float(final_return.mean()),
        "return_sd": float(final_return.std()),
        "seeds_reaching": len(finite),
        "episodes_to_threshold": float(np.median(finite)) if finite else None,
        "curves": {"success": success.tolist(), "return": returns.tolist()},
    }


def markdown(results: dict[str, dict[str, dict[str, Any]]], seeds: int, tail: int) -> str:
    lines = [
        f"| game (reward shape) | method | success, last {tail} steps | return, last {tail} steps "
        f"| episodes to threshold (median; seeds that got there of {seeds}) |",
        "|---|---|---|---|---|",
    ]
    for name, by_method in results.items():
        game = GAMES[name]
        best = max(row["success"] for row in by_method.values())
        for method, row in by_method.items():
            success = f"{row['success']:.2f} ± {row['success_sd']:.2f}"
            if row["success"] == best:
                success = f"**{success}**"
            episodes = row["episodes_to_threshold"]
            reach = f"{episodes:.0f} ({row['seeds_reaching']}/{seeds})" if episodes is not None else f"— (0/{seeds})"
            lines.append(
                f"| {name} ({game.shape}; success ≥ {game.threshold}) | {method} | {success} "
                f"| {row['return']:.3f} ± {row['return_sd']:.3f} | {reach} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", nargs="+", default=list(GAMES), choices=list(GAMES))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", type=int, default=4, help="independent runs per game and method")
    parser.add_argument("--iterations", type=int, default=60, help="policy updates per run")
    parser.add_argument("--batch", type=int, default=32, help="episodes per update (the same for every method)")
    parser.add_argument("--group", type=int, default=8, help="episodes per start state (GRPO/RLOO groups)")
    parser.add_argument("--lr", type=float, default=20.0, help="step size on the logits, the same for every method")
    parser.add_argument("--gamma", type=float, default=1.0)
    parser.add_argument("--gae-lambda", type=float, default=0.95, help="PPO's GAE lambda")
    parser.add_argument("--out", default="runs/algorithm_study", help="table, JSON and plot go here")
    parser.add_argument(
        "--no-plot", action="store_true", help="skip the learning-curve PNG (skipped anyway without matplotlib)"
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tail = max(1, args.iterations // 5)

    results: dict[str, dict[str, dict[str, Any]]] = {}
    timings: dict[str, float] = {}
    for name in args.games:
        game = GAMES[name]
        results[name] = {}
        game_started = time.perf_counter()
        for method in args.methods:
            runs = [
                train(
                    game,
                    method,
                    seed,
                    iterations=args.iterations,
                    batch=args.batch,
                    group=args.group,
                    lr=args.lr,
                    gamma=args.gamma,
                    lam=args.gae_lambda,
                )
                for seed in range(args.seeds)
            ]
            results[name][method] = summarise(game, runs, args.batch, tail)
        timings[name] = time.perf_counter() - game_started
        print(f"{name}: {timings[name]:.1f}s", flush=True)

    table = markdown(results, args.seeds, tail)
    print(table)
    elapsed = time.perf_counter() - started
    (out / "algorithm_study.md").write_text(table + "\n")
    meta = {"args": vars(args), "seconds": elapsed, "seconds_per_game": timings, "load_average": os.getloadavg()}
    (out / "algorithm_study.json").write_text(json.dumps({**meta, "results": results}, indent=2))
    written = [str(out / "algorithm_study.md"), ".json"]
    if args.no_plot:
        pass
    elif importlib.util.find_spec("matplotlib") is None:
        print("matplotlib is not installed: no learning-curve plot (pip install matplotlib)")
    else:
        written.append(str(_plot(results, out / "algorithm_study.png", args.batch)))
    print(f"wrote {', '.join(written)} ({elapsed:.1f}s, load average {os.getloadavg()[0]:.2f})")
    return results


def _plot(results: dict[str, dict[str, dict[str, Any]]], path: Path, batch: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(2, len(results))
    rows = math.ceil(len(results) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.4 * rows), squeeze=False)
    for axis in axes.flat[len(results) :]:
        axis.set_visible(False)
    for axis, (name, by_method) in zip(axes.flat, results.items(), strict=False):
        for method, row in by_method.items():
            success = np.array(row["curves"]["success"])
            episodes = np.arange(1, success.shape[1] + 1) * batch
            style = "-" if method in ("rebn", "ppo") else "--"
            axis.plot(episodes, success.mean(axis=0), style, label=method, linewidth=2 if method == "rebn" else 1.2)
        axis.set_title(f"{name} ({GAMES[name].shape})", fontsize=9)
        axis.set_xlabel("episodes")
        axis.set_ylabel("success rate (mean over seeds)", fontsize=8)
        axis.set_ylim(-0.02, 1.02)
        axis.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


if __name__ == "__main__":
    main()
