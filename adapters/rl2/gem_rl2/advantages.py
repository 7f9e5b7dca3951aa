"""``adv.estimator=rebn`` for RL2: per-turn returns, normalised over every turn of the batch.

RL2 (rl-square 0.0.2) hands ``compute_advantages(config.adv, tensor_dict, cu_seqs, step)``
a right-padded batch of sequences, already shifted for next-token prediction:
``action_mask[i, t] = 1`` when token ``t + 1`` of sequence ``i`` was generated, and
``rewards[i, t]`` holds that token's reward (the turn's reward sits on its last
generated token; a KL-in-reward penalty, if configured, on every action token).
Episodes are the sequence ranges ``cu_seqs[e]:cu_seqs[e + 1]``.

A *turn* is one run of consecutive ``action_mask`` ones; an episode's turns are its
runs in sequence order, across all of its sequences. Turn ``k`` gets reward
``r_k`` = the sum of its tokens' rewards, return ``G_k = r_k + gamma * G_{k+1}``, and
advantage ``(G_k - mean(G)) / (std(G) + eps)`` over every turn of the batch
(:func:`gem_core.rl.advantages.rebn_advantages`), on each of its tokens. RL2 computes
advantages on rank 0 over the whole batch, so the statistics are global.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from gem_core.errors import RLInputError
from gem_core.rl.advantages import rebn_advantages

__all__ = ["ESTIMATOR", "compute_advantages_with_rebn", "rebn_rl2", "turn_runs"]

#: The ``adv.estimator`` value this module handles.
ESTIMATOR = "rebn"


def turn_runs(mask_row: Sequence[int] | np.ndarray) -> list[tuple[int, int]]:
    """``[start, end)`` of each run of ones in one row of ``action_mask``, in order."""
    padded = np.concatenate(([0], np.asarray(mask_row, dtype=np.int8) != 0, [0])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return [(int(s), int(e)) for s, e in zip(edges[0::2], edges[1::2], strict=True)]


def rebn_rl2(tensor_dict: dict[str, Any], cu_seqs: Any, gamma: float) -> Any:
    """ReBN advantages on RL2's tensors: a float tensor shaped like ``tensor_dict["action_mask"]``.

    Args:
        tensor_dict: RL2's batch (``action_mask`` and ``rewards``, ``[sequences, length]``).
        cu_seqs: Episode boundaries over the sequences (``[0, ..., n_sequences]``).
        gamma: Per-turn discount (RL2's ``adv.gamma``).

    Raises:
        RLInputError: ``cu_seqs`` does not cover the batch, or an episode has no generated token.
    """
    import torch

    mask = tensor_dict["action_mask"].detach().cpu().numpy()
    token_rewards = tensor_dict["rewards"].detach().to(torch.float64).cpu().numpy()
    bounds = [int(b) for b in (cu_seqs.tolist() if hasattr(cu_seqs, "tolist") else cu_seqs)]
    if len(bounds) < 2 or bounds[0] != 0 or bounds[-1] != mask.shape[0] or any(a > b for a, b in pairwise(bounds)):
        raise RLInputError(f"cu_seqs {bounds} must run from 0 to the {mask.shape[0]} sequences of the batch, rising")
    episodes: list[list[tuple[int, int, int]]] = []  # (sequence, start, end) per turn
    for e, (first, last) in enumerate(pairwise(bounds)):
        turns = [(i, s, t) for i in range(first, last) for s, t in turn_runs(mask[i])]
        if not turns:
            raise RLInputError(f"episode {e} (sequences {first}:{last}) has no generated token to carry an advantage")
        episodes.append(turns)
    rewards = [np.array([token_rewards[i, s:t].sum() for i, s, t in turns]) for turns in episodes]
    advantages = np.zeros(mask.shape, dtype=np.float64)
    for turns, per_turn in zip(episodes, rebn_advantages(rewards, gamma), strict=True):
        for (i, s, t), value in zip(turns, per_turn, strict=True):
            advantages[i, s:t] = value
    return torch.from_numpy(advantages).to(torch.float32)


def compute_advantages_with_rebn(original: Callable[..., Any]) -> Callable[..., Any]:
    """RL2's ``compute_advantages`` that also handles ``adv.estimator=rebn`` (others go to ``original``)."""

    def compute_advantages(config: Any, tensor_dict: dict[str, Any], cu_seqs: Any, step: int) -> Any:
        if config.estimator != ESTIMATOR:
            return original(config, tensor_dict, cu_seqs, step)
        # Set on the caller's dict, as RL2's own estimators do.
        tensor_dict["advantages"] = rebn_rl2(tensor_dict, cu_seqs, float(config.gamma))
        return None

    compute_advantages.__wrapped__ = original  # type: ignore[attr-defined]
    compute_advantages.handles_rebn = True  # type: ignore[attr-defined]
    return compute_advantages
