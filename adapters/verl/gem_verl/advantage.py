"""The ``rebn`` advantage estimator for verl: per-turn returns, normalised over every turn of the batch.

verl hands a custom estimator only ``token_level_rewards`` and ``response_mask``
(``[batch, response_length]``), so turns are found from the mask: each run of
``response_mask == 1`` is one turn (one assistant generation), and the env tokens
after it belong to it. A turn's reward is the sum of the rewards on its tokens
(the agent loop puts each turn's reward on the turn's last generated token; with
``algorithm.use_kl_in_reward`` verl adds the per-token KL penalty on top).

Then, with :mod:`gem_core.rl`: per row, ``G_k = r_k + gamma * G_{k+1}`` over its
turns (``gamma = algorithm.gamma``, per turn); ``A = rebn(G)`` over all turns of all
rows; each turn's ``A`` (and ``G`` as the "returns") is broadcast to its generated
tokens, 0 elsewhere.

Both layouts of :class:`gem_verl.agent_loop.GemEnvAgentLoop` fit this: a per-episode
row has one span per turn and the per-turn rewards; a per-transition row has one
span whose reward is already the turn's return ``G_t`` (the loop computed it with
the same ``algorithm.gamma``), so ``G = r`` there.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from gem_core.errors import RLInputError
from gem_core.rl.advantages import rebn
from gem_core.rl.returns import batch_returns, check_gamma

__all__ = ["ESTIMATOR_NAME", "compute_rebn_advantage", "turn_rewards_from_tokens"]

#: The name ``algorithm.adv_estimator`` selects.
ESTIMATOR_NAME = "rebn"


def _config_value(config: Any, name: str, default: Any) -> Any:
    """Read ``name`` from verl's ``AlgoConfig`` (a dataclass), a DictConfig, a dict, or ``None``."""
    if config is None:
        return default
    if isinstance(config, dict):
        return config.get(name, default)
    getter = getattr(config, "get", None)
    if callable(getter):
        return getter(name, default)
    return getattr(config, name, default)


def turn_rewards_from_tokens(
    token_level_rewards: npt.ArrayLike, response_mask: npt.ArrayLike
) -> tuple[list[npt.NDArray[np.float64]], npt.NDArray[np.int64]]:
    """Split padded token rows into turns and sum each turn's rewards.

    Args:
        token_level_rewards: ``[batch, length]`` rewards.
        response_mask: ``[batch, length]``, 1 on generated tokens.

    Returns:
        ``(rewards, turn_of_token)``: one float64 array of turn rewards per row, and a
        ``[batch, length]`` array with each generated token's global turn index (its
        position in the concatenation of all rows' turns), ``-1`` on other tokens.
        Rewards on env tokens count for the turn before them, rewards before a row's
        first turn for its first turn; a row without generated tokens has no turns
        (its rewards are dropped: nothing could be trained on them).

    Raises:
        RLInputError: The shapes differ or are not 2-D, or a reward is NaN/inf.
    """
    rewards = np.asarray(token_level_rewards, dtype=np.float64)
    mask = np.asarray(response_mask) != 0
    if rewards.ndim != 2 or rewards.shape != mask.shape:
        raise RLInputError(
            f"token_level_rewards {rewards.shape} and response_mask {mask.shape} must be the same [batch, length] shape"
        )
    if not np.isfinite(rewards).all():
        row, col = np.argwhere(~np.isfinite(rewards))[0]
        raise RLInputError(f"token_level_rewards[{row}, {col}] is {rewards[row, col]}; rewards must be finite")
    previous = np.zeros_like(mask)
    previous[:, 1:] = mask[:, :-1]
    starts = mask & ~previous
    turns_per_row = starts.sum(axis=1)
    # Local turn index of every token: the last turn started at or before it (-1 before the first).
    local = np.cumsum(starts, axis=1) - 1
    local = np.where((local < 0) & (turns_per_row[:, None] > 0), 0, local)
    offsets = np.concatenate([[0], np.cumsum(turns_per_row)[:-1]])
    owner = np.where(local >= 0, local + offsets[:, None], -1)
    total = int(turns_per_row.sum())
    owned = owner >= 0
    sums = np.bincount(owner[owned], weights=rewards[owned], minlength=total)
    per_row = [sums[o : o + n] for o, n in zip(offsets.tolist(), turns_per_row.tolist(), strict=True)]
    return per_row, np.where(mask, owner, -1).astype(np.int64)


def compute_rebn_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verl advantage estimator ``rebn`` (registered by :mod:`gem_verl.plugin`).

    Args:
        token_level_rewards: ``[batch, length]`` rewards (``rm_scores``, minus the KL
            penalty when ``algorithm.use_kl_in_reward``).
        response_mask: ``[batch, length]``, 1 on generated tokens.
        config: verl's ``AlgoConfig``; ``gamma`` is the per-turn discount (default 1).
        index: verl's ``uid`` per row; ReBN does not group, so it is unused.
        **kwargs: Other arguments verl passes to estimators (ignored).

    Returns:
        ``(advantages, returns)``, each ``[batch, length]`` in the rewards' dtype and
        device: the turn's ReBN advantage / return on its generated tokens, 0 elsewhere.
    """
    del index, kwargs
    gamma = check_gamma(_config_value(config, "gamma", 1.0))
    rewards_np = token_level_rewards.detach().to("cpu", torch.float64).numpy()
    mask_np = response_mask.detach().to("cpu").numpy()
    per_row, turn_of_token = turn_rewards_from_tokens(rewards_np, mask_np)
    returns = batch_returns(per_row, gamma)
    flat_returns = np.concatenate(returns) if returns else np.zeros(0)
    flat_advantages = rebn(flat_returns) if flat_returns.size else flat_returns
    on_turn = turn_of_token >= 0
    advantages_np = np.zeros(turn_of_token.shape, dtype=np.float64)
    returns_np = np.zeros(turn_of_token.shape, dtype=np.float64)
    advantages_np[on_turn] = flat_advantages[turn_of_token[on_turn]]
    returns_np[on_turn] = flat_returns[turn_of_token[on_turn]]
    like = {"dtype": token_level_rewards.dtype, "device": token_level_rewards.device}
    return torch.as_tensor(advantages_np).to(**like), torch.as_tensor(returns_np).to(**like)
