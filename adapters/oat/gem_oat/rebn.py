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

__all__ = ["episode_rebn"]


def episode_rebn(
    rewards: Sequence[Sequence[float]], gamma: float, *, distributed: bool = False, device: Any = None
) -> tuple[list[FloatArray], list[FloatArray]]:
    """Per-turn returns ``G_t = r_t + gamma * G_{t+1}`` and their ReBN over every turn of the batch.

    Args:
        rewards: Per episode, the reward of each turn.
        gamma: Per-turn discount.
        distributed: Normalise with statistics over every rank of the initialised
            ``torch.distributed`` group (each rank passes its own episodes).
        device: Device of the all-reduce tensor (a CUDA device for NCCL).

    Returns:
        ``(returns, advantages)``: one float64 array per episode, one value per turn.
    """
    returns = batch_returns([np.asarray(r, dtype=np.float64) for r in rewards], gamma)
    lengths = [len(r) for r in returns]
    flat = np.concatenate(returns) if returns else np.zeros(0)
    if distributed:
        import torch

        from gem_core.rl.torch_utils import rebn_tensor

        tensor = torch.as_tensor(flat, dtype=torch.float64, device=device)
        normalized = rebn_tensor(tensor, distributed=True).cpu().numpy()
    else:
        normalized = rebn(flat)
    splits = np.cumsum(lengths)[:-1]
    return returns, [np.asarray(a, dtype=np.float64) for a in np.split(normalized, splits)]
