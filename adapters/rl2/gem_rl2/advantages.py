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

**Env errors.** RL2's rollout loop trains on every token it generated, and the env
module can only hand it a reward. An episode an env error ended
(``on_env_error="end"``) therefore ends with the reward
:data:`~gem_rl2.env_errors.ENV_ERROR_REWARD` (NaN). Before any estimator runs, gem's
``compute_advantages`` finds such episodes, sets their ``action_mask`` (the actor's
loss mask) and rewards to 0, so their tokens weigh nothing in the loss and are in no
statistic of ``rebn`` (RL2's own estimators see a reward of 0 in their baselines;
``eos_mask``, which gives RL2 the sequence lengths, stays); it counts them as ``gem/env_errors`` (logged to wandb
when a run is active) and logs one warning per batch naming them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from gem_core.episode import env_error_report
from gem_core.errors import RLInputError
from gem_core.rl.advantages import rebn_advantages
from gem_rl2.env_errors import drain, mark_installed

__all__ = [
    "ENV_ERRORS_METRIC",
    "ESTIMATOR",
    "compute_advantages_with_rebn",
    "drop_failed_episodes",
    "rebn_rl2",
    "turn_runs",
]

#: The metric counting the batch's episodes an env error ended.
ENV_ERRORS_METRIC = "gem/env_errors"

_logger = logging.getLogger(__name__)

#: The ``adv.estimator`` value this module handles.
ESTIMATOR = "rebn"


def turn_runs(mask_row: Sequence[int] | np.ndarray) -> list[tuple[int, int]]:
    """``[start, end)`` of each run of ones in one row of ``action_mask``, in order."""
    padded = np.concatenate(([0], np.asarray(mask_row, dtype=np.int8) != 0, [0])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return [(int(s), int(e)) for s, e in zip(edges[0::2], edges[1::2], strict=True)]


def _bounds(cu_seqs: Any, sequences: int) -> list[int]:
    bounds = [int(b) for b in (cu_seqs.tolist() if hasattr(cu_seqs, "tolist") else cu_seqs)]
    if len(bounds) < 2 or bounds[0] != 0 or bounds[-1] != sequences or any(a > b for a, b in pairwise(bounds)):
        raise RLInputError(f"cu_seqs {bounds} must run from 0 to the {sequences} sequences of the batch, rising")
    return bounds


def drop_failed_episodes(tensor_dict: dict[str, Any], cu_seqs: Any) -> list[int]:
    """Take the episodes an env error ended out of training, in place; return their indices.

    An episode is failed when a reward of it is NaN (:data:`~gem_rl2.env_errors.ENV_ERROR_REWARD`).
    Its sequences get ``action_mask`` and ``rewards`` 0 (RL2's actor multiplies log-probs and
    entropy by ``action_mask``, and advantages are 0 off it).

    Raises:
        RLInputError: ``cu_seqs`` does not cover the batch.
    """
    import torch

    rewards = tensor_dict["rewards"]
    bounds = _bounds(cu_seqs, rewards.shape[0])
    nan_rows = torch.isnan(rewards).any(dim=-1).cpu().tolist()
    failed = [e for e, (first, last) in enumerate(pairwise(bounds)) if any(nan_rows[first:last])]
    for e in failed:
        rows = slice(bounds[e], bounds[e + 1])
        for key in ("action_mask", "rewards"):
            tensor_dict[key][rows] = 0
    return failed


def rebn_rl2(tensor_dict: dict[str, Any], cu_seqs: Any, gamma: float, skip: Collection[int] = ()) -> Any:
    """ReBN advantages on RL2's tensors: a float tensor shaped like ``tensor_dict["action_mask"]``.

    Args:
        tensor_dict: RL2's batch (``action_mask`` and ``rewards``, ``[sequences, length]``).
        cu_seqs: Episode boundaries over the sequences (``[0, ..., n_sequences]``).
        gamma: Per-turn discount (RL2's ``adv.gamma``).
        skip: Episodes to leave out (advantage 0, in no statistic): those an env error ended.

    Raises:
        RLInputError: ``cu_seqs`` does not cover the batch, or an episode (not skipped) has no
            generated token.
    """
    import torch

    mask = tensor_dict["action_mask"].detach().cpu().numpy()
    token_rewards = tensor_dict["rewards"].detach().to(torch.float64).cpu().numpy()
    bounds = _bounds(cu_seqs, mask.shape[0])
    episodes: list[list[tuple[int, int, int]]] = []  # (sequence, start, end) per turn
    for e, (first, last) in enumerate(pairwise(bounds)):
        turns = [] if e in skip else [(i, s, t) for i in range(first, last) for s, t in turn_runs(mask[i])]
        if not turns and e not in skip:
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
        failed = drop_failed_episodes(tensor_dict, cu_seqs)
        _report_env_errors(len(failed), len(cu_seqs) - 1, step, compute_advantages)
        if config.estimator != ESTIMATOR:
            return original(config, tensor_dict, cu_seqs, step)
        # Set on the caller's dict, as RL2's own estimators do.
        tensor_dict["advantages"] = rebn_rl2(tensor_dict, cu_seqs, float(config.gamma), skip=set(failed))
        return None

    mark_installed()
    compute_advantages.__wrapped__ = original  # type: ignore[attr-defined]
    compute_advantages.handles_rebn = True  # type: ignore[attr-defined]
    compute_advantages.last_metrics = {}  # type: ignore[attr-defined]
    return compute_advantages


def _report_env_errors(count: int, total: int, step: int, holder: Any) -> None:
    """``gem/env_errors`` of this batch (kept on ``holder.last_metrics``, and to wandb in a run) and its warning."""
    holder.last_metrics = {ENV_ERRORS_METRIC: float(count)}
    report = env_error_report(drain(), total=total)
    if count and report is not None:
        _logger.warning("gem_rl2: %s", report)
    import wandb

    if wandb.run is not None:
        wandb.log(holder.last_metrics, step=step)
