"""Cost of the ``rebn`` estimator inside verl, next to verl's own estimators, in one run.

Needs the verl adapter installed (``tox run -e verl`` builds such an env):

    .tox/verl/bin/python bench/verl_rebn.py [--batch 512] [--length 4096] [--turns 8]

Builds a ``[batch, length]`` batch in the per-episode layout (``turns`` generated spans per
row with env tokens between them, one reward per turn) and times verl's
``compute_advantage`` with ``rebn`` (turns from the mask's runs: what verl's dispatch
passes a custom estimator), ``rebn`` with the explicit turn ids the v1 trainer hook
passes (``gem_verl.trainer_hook``), ``reinforce_plus_plus`` (token-level, the closest
built-in) and ``grpo`` (episode-level). Prints medians and the ratio to ``rebn``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import verl  # noqa: F401  (registers rebn)
from gem_verl.advantage import compute_rebn_advantage
from verl import DataProto
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo.ray_trainer import compute_advantage


def make_batch(batch: int, length: int, turns: int, seed: int = 0) -> DataProto:
    rng = np.random.default_rng(seed)
    rewards = torch.zeros(batch, length)
    mask = torch.zeros(batch, length, dtype=torch.long)
    span = length // turns
    for row in range(batch):
        for t in range(turns):
            start = t * span
            generated = int(rng.integers(span // 4, span // 2))
            mask[row, start : start + generated] = 1
            rewards[row, start + generated - 1] = float(rng.choice([-0.1, 0.0, 1.0]))
    uids = np.array([f"g{row // 8}" for row in range(batch)], dtype=object)
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": uids}
    )


def turn_ids_of(mask: torch.Tensor) -> torch.Tensor:
    """The per-token turn ids the agent loop stores (``gem_turn_ids``) for a mask of generated spans."""
    starts = mask.bool() & ~torch.nn.functional.pad(mask.bool(), (1, 0))[:, :-1]
    return torch.where(mask.bool(), torch.cumsum(starts.long(), dim=1) - 1, torch.full_like(mask, -1))


def time_turn_ids(data: DataProto, repeats: int) -> float:
    turn_ids = turn_ids_of(data.batch["response_mask"])
    config = AlgoConfig(gamma=0.9, adv_estimator="rebn")
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        compute_rebn_advantage(
            data.batch["token_level_rewards"], data.batch["response_mask"], config=config, turn_ids=turn_ids
        )
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def time_estimator(data: DataProto, name: str, repeats: int) -> float:
    config = AlgoConfig(gamma=0.9 if name != "grpo" else 1.0, adv_estimator=name)
    samples = []
    for _ in range(repeats):
        copy = DataProto(batch=data.batch.clone(), non_tensor_batch=dict(data.non_tensor_batch))
        started = time.perf_counter()
        compute_advantage(copy, adv_estimator=name, gamma=config.gamma, config=config)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    data = make_batch(args.batch, args.length, args.turns)
    medians = {name: time_estimator(data, name, args.repeats) for name in ["rebn", "reinforce_plus_plus", "grpo"]}
    medians["rebn (turn ids)"] = time_turn_ids(data, args.repeats)
    print(f"batch={args.batch} length={args.length} turns={args.turns} repeats={args.repeats} (median seconds)")
    for name, median in medians.items():
        print(f"  {name:22s} {median * 1e3:9.2f} ms   x{median / medians['rebn']:.2f} of rebn")


if __name__ == "__main__":
    main()
