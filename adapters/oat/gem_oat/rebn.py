"""Per-turn returns and ReBN for oat episodes, in float64.

oat's own ReBN (``--whiten_adv`` in ``PPOMultiTurnLearner.learning_step``) whitens the
advantages with ``std = sqrt(SS/N - mean**2)`` in float32. When every return of the batch
is equal (a batch of format errors, or of equal discounted rewards) the true variance is
0, but float32 rounding leaves ``SS/N - mean**2`` a few ulps below or above zero: for
returns of 0.1, -0.1 or 0.6561 it is negative and the square root is NaN (a NaN loss),
for -0.19 it is a tiny positive number and the "normalised" advantages become +-14.9 instead
of 0. The core's :func:`gem_core.rl.advantages.rebn` works in float64 with two passes,
tests equality exactly and gives exact zeros there, never NaN; across ranks
:func:`gem_core.rl.torch_utils.rebn_tensor` all-reduces float64 moments around the global
mean. So gem's learner keeps ``whiten_adv`` off and writes these advantages itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gem_core.rl.advantages import rebn
from gem_core.rl.returns import FloatArray, batch_returns

__all__ = ["episode_rebn", "episode_returns", "rebn_over_ranks"]


def episode_returns(rewards: Sequence[Sequence[float]], gamma: float) -> list[FloatArray]:
    """Per episode, the per-turn returns ``G_t = r_t + gamma * G_{t+1}`` in float64 (no episodes: ``[]``)."""
    return batch_returns([np.asarray(r, dtype=np.float64) for r in rewards], gamma)


def rebn_over_ranks(returns: Sequence[float], *, distributed: bool = False, device: Any = None) -> FloatArray:
    """ReBN of ``returns`` (one per transition), with statistics over every rank's transitions when ``distributed``.

    Every rank must call it (the all-reduce is collective), also a rank with no transitions:
    it then contributes nothing to the statistics and gets an empty array back.
    """
    flat = np.asarray(returns, dtype=np.float64).reshape(-1)
    if not distributed:
        return np.asarray(rebn(flat), dtype=np.float64)
    import torch

    from gem_core.rl.torch_utils import rebn_tensor

    tensor = torch.as_tensor(flat, dtype=torch.float64, device=device)
    return np.asarray(rebn_tensor(tensor, distributed=True).cpu().numpy(), dtype=np.float64)


def episode_rebn(
    rewards: Sequence[Sequence[float]], gamma: float, *, distributed: bool = False, device: Any = None
) -> tuple[list[FloatArray], list[FloatArray]]:
    """Per-turn returns ``G_t = r_t + gamma * G_{t+1}`` and their ReBN over every turn of the batch.

    Args:
        rewards: Per episode, the reward of each turn (may be empty: a rank that kept no episode).
        gamma: Per-turn discount.
        distributed: Normalise with statistics over every rank of the initialised
            ``torch.distributed`` group (each rank passes its own episodes).
        device: Device of the all-reduce tensor (a CUDA device for NCCL).

    Returns:
        ``(returns, advantages)``: one float64 array per episode, one value per turn.
    """
    returns = episode_returns(rewards, gamma)
    flat = np.concatenate(returns) if returns else np.zeros(0)
    normalized = rebn_over_ranks(flat, distributed=distributed, device=device)
    advantages, start = [], 0
    for episode in returns:
        advantages.append(normalized[start : start + len(episode)])
        start += len(episode)
    return returns, advantages
