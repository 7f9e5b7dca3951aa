"""Per-turn discounted returns ``G_t = r_t + gamma * G_{t+1}``.

``gamma`` discounts *turns*, not tokens: a 3-turn episode with rewards ``r`` has
``G_2 = r_2``, ``G_1 = r_1 + gamma * r_2``, ``G_0 = r_0 + gamma * r_1 + gamma**2 * r_2``
however many tokens each turn generated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import numpy as np
import numpy.typing as npt

from gem_core.errors import RLInputError
from gem_core.rl.types import Episode

__all__ = [
    "FloatArray",
    "RewardBatch",
    "as_rewards",
    "batch_returns",
    "batch_rewards",
    "check_gamma",
    "discounted_returns",
    "episode_return",
]

FloatArray = npt.NDArray[np.float64]
#: A batch of episodes: :class:`Episode` records, or one 1-D array of per-turn rewards per episode.
RewardBatch = Sequence[Union[Episode, npt.ArrayLike]]


def check_gamma(gamma: float) -> float:
    """Validate a discount factor and return it as a float.

    Raises:
        RLInputError: ``gamma`` is not a number in ``[0, 1]``.
    """
    try:
        value = float(gamma)
    except (TypeError, ValueError):
        raise RLInputError(f"gamma must be a number in [0, 1], got {gamma!r}") from None
    if not 0.0 <= value <= 1.0:  # also rejects NaN
        raise RLInputError(f"gamma must be in [0, 1] (a per-turn discount), got {gamma!r}")
    return value


def as_rewards(rewards: npt.ArrayLike, *, name: str = "rewards") -> FloatArray:
    """Convert per-turn rewards to a finite 1-D float64 array.

    Raises:
        RLInputError: Not 1-D, not numeric, or holds NaN/inf.
    """
    try:
        array = np.asarray(rewards, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise RLInputError(f"{name} must be numbers, got {rewards!r}: {exc}") from None
    if array.ndim != 1:
        raise RLInputError(f"{name} must be 1-D (one value per turn), got shape {array.shape}")
    if not np.isfinite(array).all():
        bad = int(np.flatnonzero(~np.isfinite(array))[0])
        raise RLInputError(f"{name}[{bad}] is {array[bad]}; rewards must be finite")
    return array


def batch_rewards(batch: RewardBatch) -> list[FloatArray]:
    """Per-turn rewards of each episode of a batch, as float64 arrays."""
    return [
        item.rewards if isinstance(item, Episode) else as_rewards(item, name=f"batch[{i}]")
        for i, item in enumerate(batch)
    ]


def discounted_returns(rewards: npt.ArrayLike | Episode, gamma: float = 1.0) -> FloatArray:
    """Return ``G_t = r_t + gamma * G_{t+1}`` for every turn of one episode.

    Args:
        rewards: The episode's per-turn rewards (or the :class:`Episode` itself).
        gamma: Per-turn discount in ``[0, 1]``.

    Returns:
        A float64 array with one return per turn (empty for an empty episode).

    Example:
        >>> discounted_returns([0.0, 0.0, 1.0], gamma=0.9).tolist()
        [0.81, 0.9, 1.0]
    """
    g = check_gamma(gamma)
    r = rewards.rewards if isinstance(rewards, Episode) else as_rewards(rewards)
    out = np.empty_like(r)
    running = 0.0
    # A Python loop: episodes have tens of turns, and a scan keeps the recursion exact.
    for t in range(r.shape[0] - 1, -1, -1):
        running = float(r[t]) + g * running
        out[t] = running
    return out


def episode_return(rewards: npt.ArrayLike | Episode, gamma: float = 1.0) -> float:
    """Return ``G_0``, the discounted return of the whole episode (0.0 for no turns)."""
    returns = discounted_returns(rewards, gamma)
    return float(returns[0]) if returns.size else 0.0


def batch_returns(batch: RewardBatch, gamma: float = 1.0) -> list[FloatArray]:
    """Per-turn discounted returns of every episode of a batch (ragged: one array per episode)."""
    return [discounted_returns(r, gamma) for r in batch_rewards(batch)]
