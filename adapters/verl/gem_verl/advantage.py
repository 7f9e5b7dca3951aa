"""The ``rebn`` advantage estimator for verl: per-turn returns, normalised over every turn of the batch.

**Turn boundaries are explicit**: ``turn_ids`` (``[batch, response_length]``) holds,
per token, the index of the turn that generated it (``-1`` on env and template
tokens). The agent loop writes it next to each sample (``gem_turn_ids``) and
:mod:`gem_verl.trainer_hook` hands it to this estimator in verl's v1 trainer (verl
0.9.1 gives a custom estimator only ``token_level_rewards``, ``response_mask``,
``config`` and ``index``). So a response mask changed after the rollout, e.g. by
token-level rejection sampling (``algorithm.rollout_correction.rollout_rs=token_*``,
which zeroes tokens *inside* a turn), cannot split a turn: the turn keeps one reward,
one return and one advantage, placed on its tokens that are still in the mask.

Without ``turn_ids`` (a direct call, or samples from another agent loop), each run of
``response_mask == 1`` is one turn and the env tokens after it belong to it; that is
only right for the mask the loop wrote, so token-level rejection sampling without
``turn_ids`` is refused with a :class:`~gem_core.errors.ConfigError`.

A turn's reward is the sum of the rewards on its tokens (the agent loop puts each
turn's reward on the turn's last generated token; with ``algorithm.use_kl_in_reward``
verl adds the per-token KL penalty on top); rewards on tokens of no turn count for the
turn before them.

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

from gem_core.errors import ConfigError, RLInputError
from gem_core.rl.advantages import rebn
from gem_core.rl.returns import batch_returns, check_gamma

__all__ = [
    "ESTIMATOR_NAME",
    "compute_rebn_advantage",
    "token_level_rejection",
    "turn_ids_from_mask",
    "turn_rewards_from_tokens",
]

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


def token_level_rejection(config: Any) -> bool:
    """Whether ``algorithm.rollout_correction.rollout_rs`` has a token-level option (``token_k1``, ...).

    Token-level rejection sampling zeroes single tokens of ``response_mask``, inside turns.
    """
    rollout_rs = _config_value(_config_value(config, "rollout_correction", None), "rollout_rs", None)
    if not rollout_rs:
        return False
    return any(part.strip().startswith("token") for part in str(rollout_rs).split(","))


def turn_ids_from_mask(response_mask: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Turn ids from the runs of a response mask: each run of 1s is one turn (``-1`` elsewhere).

    Only right for the mask the agent loop wrote (its generated spans are separated by
    env tokens); see the module docstring.
    """
    mask = np.asarray(response_mask) != 0
    if mask.ndim != 2:
        raise RLInputError(f"response_mask must be [batch, length], got shape {mask.shape}")
    previous = np.zeros_like(mask)
    previous[:, 1:] = mask[:, :-1]
    local = np.cumsum(mask & ~previous, axis=1) - 1
    return np.where(mask, local, -1).astype(np.int64)


def turn_rewards_from_tokens(
    token_level_rewards: npt.ArrayLike, turn_ids: npt.ArrayLike
) -> tuple[list[npt.NDArray[np.float64]], npt.NDArray[np.int64]]:
    """Group padded token rows into their turns and sum each turn's rewards.

    Args:
        token_level_rewards: ``[batch, length]`` rewards.
        turn_ids: ``[batch, length]``: per token, the index (0, 1, ...) of the turn of its
            row that generated it, ``-1`` on other tokens (env replies, padding).

    Returns:
        ``(rewards, owner)``: one float64 array of turn rewards per row (``max id + 1``
        turns), and a ``[batch, length]`` array with each turn token's global turn index
        (its position in the concatenation of all rows' turns), ``-1`` on other tokens.
        Rewards on tokens of no turn count for the last turn before them (for the first
        turn when before it); a row without turns has its rewards dropped (nothing could
        be trained on them).

    Raises:
        RLInputError: The shapes differ or are not 2-D, an id is below -1, or a reward is NaN/inf.
    """
    rewards = np.asarray(token_level_rewards, dtype=np.float64)
    ids = np.asarray(turn_ids).astype(np.int64)
    if rewards.ndim != 2 or rewards.shape != ids.shape:
        raise RLInputError(
            f"token_level_rewards {rewards.shape} and turn ids {ids.shape} must be the same [batch, length] shape"
        )
    if (ids < -1).any():
        raise RLInputError(f"turn ids must be >= -1 (-1: not a generated token), got {int(ids.min())}")
    if not np.isfinite(rewards).all():
        row, col = np.argwhere(~np.isfinite(rewards))[0]
        raise RLInputError(f"token_level_rewards[{row}, {col}] is {rewards[row, col]}; rewards must be finite")
    turns_per_row = (ids.max(axis=1, initial=-1) + 1).astype(np.int64)
    # Owner of a reward: the last turn at or before its token (the first turn before any).
    running = np.maximum.accumulate(ids, axis=1) if ids.size else ids
    running = np.where((running < 0) & (turns_per_row[:, None] > 0), 0, running)
    offsets = np.concatenate([[0], np.cumsum(turns_per_row)[:-1]]).astype(np.int64)
    reward_owner = np.where(running >= 0, running + offsets[:, None], -1)
    owned = reward_owner >= 0
    sums = np.bincount(reward_owner[owned], weights=rewards[owned], minlength=int(turns_per_row.sum()))
    per_row = [sums[o : o + n] for o, n in zip(offsets.tolist(), turns_per_row.tolist(), strict=True)]
    return per_row, np.where(ids >= 0, ids + offsets[:, None], -1).astype(np.int64)


def compute_rebn_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: Any = None,
    turn_ids: torch.Tensor | npt.ArrayLike | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verl advantage estimator ``rebn`` (registered by :mod:`gem_verl.plugin`).

    Args:
        token_level_rewards: ``[batch, length]`` rewards (``rm_scores``, minus the KL
            penalty when ``algorithm.use_kl_in_reward``).
        response_mask: ``[batch, length]``, 1 on tokens to train on (after any rejection sampling).
        config: verl's ``AlgoConfig``; ``gamma`` is the per-turn discount (default 1).
        index: verl's ``uid`` per row; ReBN does not group, so it is unused.
        turn_ids: ``[batch, length]`` explicit turn boundaries (see the module
            docstring); ``None``: the runs of ``response_mask``.
        **kwargs: Other arguments verl passes to estimators (ignored).

    Returns:
        ``(advantages, returns)``, each ``[batch, length]`` in the rewards' dtype and
        device: the turn's ReBN advantage / return on its tokens that are in
        ``response_mask``, 0 elsewhere.

    Raises:
        ConfigError: No ``turn_ids`` while ``config`` has token-level rejection sampling.
        RLInputError: Bad shapes, ids or rewards; a bad ``gamma``.
    """
    del index, kwargs
    gamma = check_gamma(_config_value(config, "gamma", 1.0))
    rewards_np = token_level_rewards.detach().to("cpu", torch.float64).numpy()
    mask_np = response_mask.detach().to("cpu").numpy() != 0
    if turn_ids is None:
        if token_level_rejection(config):
            raise ConfigError(
                "rebn got no turn boundaries (gem_turn_ids) while algorithm.rollout_correction.rollout_rs is "
                "token-level: turns read off the rejected response_mask would be split. Train on samples of "
                "gem_env_agent in verl's v1 trainer (gem_verl.trainer_hook passes the boundaries) or use a "
                "sequence-level rollout_rs (seq_*)"
            )
        ids_np = turn_ids_from_mask(mask_np)
    else:
        ids = turn_ids.detach().to("cpu").numpy() if isinstance(turn_ids, torch.Tensor) else np.asarray(turn_ids)
        if ids.shape != mask_np.shape:
            raise RLInputError(f"turn_ids {ids.shape} and response_mask {mask_np.shape} must have the same shape")
        ids_np = ids.astype(np.int64)
    per_row, owner = turn_rewards_from_tokens(rewards_np, ids_np)
    returns = batch_returns(per_row, gamma)
    flat_returns = np.concatenate(returns) if returns else np.zeros(0)
    flat_advantages = rebn(flat_returns) if flat_returns.size else flat_returns
    trained = (owner >= 0) & mask_np
    advantages_np = np.zeros(owner.shape, dtype=np.float64)
    returns_np = np.zeros(owner.shape, dtype=np.float64)
    advantages_np[trained] = flat_advantages[owner[trained]]
    returns_np[trained] = flat_returns[owner[trained]]
    like = {"dtype": token_level_rewards.dtype, "device": token_level_rewards.device}
    return torch.as_tensor(advantages_np).to(**like), torch.as_tensor(returns_np).to(**like)
