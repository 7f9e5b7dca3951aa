"""Role-conditioned advantage estimators for verl: ``role_rebn`` and ``role_grpo`` (multi-agent self-play).

The samples of :class:`gem_verl.multiagent.GemMultiAgentLoop` are seat trajectories; each carries
its seat in ``extra_fields["gem"]["seat"]``. verl hands a registered estimator only the rewards,
the mask, the config and the row ``index`` (uid), so in verl's v1 trainer the hook installed here
reads each sample's seat and turn boundaries (``gem_turn_ids``) from storage, as
:mod:`gem_verl.trainer_hook` does for ``rebn``, and passes them on:

* ``role_rebn``: per-turn returns (``algorithm.gamma``), ReBN-normalised among the turns of one
  seat (:func:`gem_core.rl.roles.role_rebn_advantages`);
* ``role_grpo``: GRPO over groups of one row (uid: one start state) *and* one seat
  (:func:`gem_core.rl.roles.role_grpo_advantages`), on every turn of the trajectory.

A batch where some sample has no seat (another agent loop's) is refused with an
:class:`~gem_core.errors.RLInputError`: pooling it with the seats would mix roles.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from gem_core.errors import ConfigError, RLInputError
from gem_core.rl.returns import check_gamma
from gem_core.rl.roles import role_grpo_advantages, role_rebn_advantages
from gem_verl.advantage import _config_value, turn_ids_from_mask, turn_rewards_from_tokens

__all__ = ["ROLE_ESTIMATORS", "compute_role_advantage", "install", "seats_of", "uid_groups"]

_logger = logging.getLogger(__name__)

#: The names ``algorithm.adv_estimator`` selects for multi-agent samples.
ROLE_ESTIMATORS = ("role_rebn", "role_grpo")

_TURN_IDS_FIELD = "gem_turn_ids"


def seats_of(extra_fields: Sequence[Any]) -> list[str]:
    """Each sample's seat, from its ``extra_fields["gem"]["seat"]``.

    Raises:
        RLInputError: A sample names no seat (naming the first such sample).
    """
    seats = []
    for row, fields in enumerate(extra_fields):
        gem = fields.get("gem") if isinstance(fields, dict) else None
        seat = gem.get("seat") if isinstance(gem, dict) else None
        if not isinstance(seat, str) or not seat:
            raise RLInputError(
                f"sample {row} of the batch names no seat (extra_fields['gem']['seat']): role estimators take "
                "samples of gem_multiagent_agent only; a sample without a role would be pooled with the seats"
            )
        seats.append(seat)
    return seats


def uid_groups(index: Any, size: int) -> list[Any]:
    """Verl's ``uid`` per row as hashable group ids (``None``: every row its own group)."""
    if index is None:
        return list(range(size))
    values = index.tolist() if hasattr(index, "tolist") else list(index)
    if len(values) != size:
        raise RLInputError(f"got {len(values)} uids for {size} rows")
    return [str(v) for v in values]


def compute_role_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: Any = None,
    turn_ids: torch.Tensor | npt.ArrayLike | None = None,
    seats: Sequence[str] | None = None,
    estimator: str = "role_rebn",
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verl advantage estimators ``role_rebn`` / ``role_grpo`` (see the module docstring).

    Args:
        token_level_rewards: ``[batch, length]`` rewards (each turn's on its last generated token).
        response_mask: ``[batch, length]``, 1 on trained tokens.
        config: verl's ``AlgoConfig`` (``gamma``).
        index: verl's ``uid`` per row (``role_grpo``'s start-state groups).
        turn_ids: ``[batch, length]`` turn boundaries; ``None``: the runs of ``response_mask``.
        seats: One seat per row; required.
        estimator: ``"role_rebn"`` or ``"role_grpo"``.
        **kwargs: Other arguments verl passes (ignored).

    Returns:
        ``(advantages, returns)``: each turn's value on its tokens in ``response_mask``, 0 elsewhere.

    Raises:
        ConfigError: No ``seats`` (called outside verl's v1 trainer with gem's hook) or an unknown estimator.
        RLInputError: Bad shapes or rewards, or ``seats`` of the wrong length.
    """
    del kwargs
    if seats is None:
        raise ConfigError(
            f"{estimator} needs each sample's seat: train samples of gem_multiagent_agent in verl's v1 trainer "
            "(gem_verl's hook reads the seats from storage)"
        )
    if estimator not in ROLE_ESTIMATORS:
        raise ConfigError(f"estimator must be one of {ROLE_ESTIMATORS}, got {estimator!r}")
    gamma = check_gamma(_config_value(config, "gamma", 1.0))
    rewards_np = token_level_rewards.detach().to("cpu", torch.float64).numpy()
    mask_np = response_mask.detach().to("cpu").numpy() != 0
    if len(seats) != rewards_np.shape[0]:
        raise RLInputError(f"got {len(seats)} seats for {rewards_np.shape[0]} rows; give one per row")
    if turn_ids is None:
        ids_np = turn_ids_from_mask(mask_np)
    else:
        ids = turn_ids.detach().to("cpu").numpy() if isinstance(turn_ids, torch.Tensor) else np.asarray(turn_ids)
        if ids.shape != mask_np.shape:
            raise RLInputError(f"turn_ids {ids.shape} and response_mask {mask_np.shape} must have the same shape")
        ids_np = ids.astype(np.int64)
    per_row, owner = turn_rewards_from_tokens(rewards_np, ids_np)
    from gem_core.rl.returns import batch_returns

    returns = batch_returns(per_row, gamma)
    if estimator == "role_rebn":
        values = role_rebn_advantages(per_row, roles=list(seats), gamma=gamma)
    else:
        values = role_grpo_advantages(
            per_row, roles=list(seats), group_ids=uid_groups(index, len(per_row)), gamma=gamma
        )
    flat_adv = np.concatenate(values) if values else np.zeros(0)
    flat_ret = np.concatenate(returns) if returns else np.zeros(0)
    trained = (owner >= 0) & mask_np
    advantages_np = np.zeros(owner.shape, dtype=np.float64)
    returns_np = np.zeros(owner.shape, dtype=np.float64)
    advantages_np[trained] = flat_adv[owner[trained]]
    returns_np[trained] = flat_ret[owner[trained]]
    like = {"dtype": token_level_rewards.dtype, "device": token_level_rewards.device}
    return torch.as_tensor(advantages_np).to(**like), torch.as_tensor(returns_np).to(**like)


def register(core_algos: ModuleType) -> None:
    """Register ``role_rebn`` and ``role_grpo`` with verl's estimators (``core_algos``); idempotent."""
    for name in ROLE_ESTIMATORS:
        if name not in core_algos.ADV_ESTIMATOR_REGISTRY:
            core_algos.register_adv_est(name)(functools.partial(compute_role_advantage, estimator=name))


def install(trainer_base: ModuleType) -> None:
    """Hand the role estimators each sample's seat and turn boundaries in verl's v1 trainer (idempotent)."""
    original = trainer_base.compute_advantage_for_multi_trajectories
    if getattr(original, "__gem_verl_roles__", False):
        return

    @functools.wraps(original)
    def compute_advantage_for_multi_trajectories(
        data: Any, batch_keys: list[str], adv_estimator: Any, **kwargs: Any
    ) -> Any:
        name = str(getattr(adv_estimator, "value", adv_estimator))
        if name not in ROLE_ESTIMATORS:
            return original(data, batch_keys=batch_keys, adv_estimator=adv_estimator, **kwargs)
        from gem_verl.trainer_hook import _PARTITION, check_trainable, padded_turn_ids

        check_trainable(data.batch["response_mask"], batch_keys)
        mask = data.batch["response_mask"]
        stored = trainer_base.tq.kv_batch_get(
            keys=list(batch_keys), partition_id=_PARTITION.get(), select_fields=[_TURN_IDS_FIELD, "extra_fields"]
        )
        fields = stored["extra_fields"]
        seats = seats_of(fields.tolist() if hasattr(fields, "tolist") else list(fields))
        turn_ids = padded_turn_ids(stored[_TURN_IDS_FIELD], mask.shape[1])
        index = data.non_tensor_batch.get("uid") if hasattr(data, "non_tensor_batch") else None
        advantages, returns = compute_role_advantage(
            data.batch["token_level_rewards"],
            mask,
            config=kwargs.get("config"),
            index=index,
            turn_ids=turn_ids,
            seats=seats,
            estimator=name,
        )
        data.batch["advantages"] = advantages
        data.batch["returns"] = returns
        return data

    compute_advantage_for_multi_trajectories.__gem_verl_roles__ = True  # type: ignore[attr-defined]
    # __wrapped__ names verl's own dispatch underneath both of gem's hooks (what callers unwrap to)
    compute_advantage_for_multi_trajectories.__wrapped__ = getattr(original, "__wrapped__", original)  # type: ignore[attr-defined]
    trainer_base.compute_advantage_for_multi_trajectories = compute_advantage_for_multi_trajectories
