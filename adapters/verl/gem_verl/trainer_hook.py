"""Hands ``rebn`` the explicit turn boundaries in verl's v1 trainer.

verl 0.9.1 gives a custom advantage estimator only ``token_level_rewards``,
``response_mask``, ``config`` and ``index`` (``ray_trainer.compute_advantage``), and the
v1 trainer's ``PPOTrainer._compute_advantage`` reads a fixed list of fields from its
TransferQueue storage. The turn boundaries the agent loop stored with each sample
(``gem_turn_ids``, see :class:`gem_verl.agent_loop.GemAgentLoopOutput`) would never
reach the estimator. :func:`install` wraps the two names of ``trainer_base`` on that
path, for ``algorithm.adv_estimator=rebn`` only:

* ``PPOTrainer._compute_advantage`` remembers which storage partition the batch is in;
* ``compute_advantage_for_multi_trajectories`` (called with the batch's storage keys,
  after verl's rollout correction changed ``response_mask``) reads ``gem_turn_ids`` of
  those keys and calls :func:`~gem_verl.advantage.compute_rebn_advantage` with them.

Every other estimator goes to verl's own code unchanged. Samples without
``gem_turn_ids`` (another agent loop) fall back to the mask's runs (refused with a
``ConfigError`` under token-level rejection sampling).

For every estimator, the advantage step refuses a batch with no trainable token
(:func:`check_trainable`: verl's loss would be 0/0), and ``PPOTrainer._compute_metrics``
also reports ``gem/env_errors``:
the episodes of the batch an env error ended (``+gem.on_env_error=end``, the agent
loop's default), with one warning per batch naming their env ids, seeds and errors.
"""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import torch

from gem_core.episode import env_error_report, failed_by_env
from gem_core.errors import RLInputError
from gem_verl.advantage import ESTIMATOR_NAME, compute_rebn_advantage

__all__ = [
    "ENV_ERRORS_METRIC",
    "TURN_IDS_FIELD",
    "check_trainable",
    "env_error_metrics",
    "install",
    "padded_turn_ids",
]

_logger = logging.getLogger(__name__)

#: The stored per-token field with each sample's turn ids.
TURN_IDS_FIELD = "gem_turn_ids"

#: The per-step metric counting episodes an env error ended.
ENV_ERRORS_METRIC = "gem/env_errors"

_PARTITION: contextvars.ContextVar[str] = contextvars.ContextVar("gem_verl_partition", default="train")


def padded_turn_ids(rows: Any, width: int) -> torch.Tensor:
    """``[batch, width]`` turn ids from a nested (or list of 1-D) tensor, padded with -1 (no turn)."""
    unbound: Sequence[torch.Tensor] = rows.unbind() if getattr(rows, "is_nested", False) else list(rows)
    out = torch.full((len(unbound), width), -1, dtype=torch.int64)
    for i, row in enumerate(unbound):
        values = torch.as_tensor(row, dtype=torch.int64).reshape(-1)[:width]
        out[i, : values.numel()] = values
    return out


def check_trainable(response_mask: torch.Tensor, batch_keys: Sequence[str]) -> None:
    """Refuse a step whose batch has no token to train on, before verl divides by its token count.

    verl's loss aggregations divide by the batch's trainable tokens (``token-mean``) or
    sequences (``seq-mean-*``): with none, the loss and every gradient are NaN and the
    weights are ruined without an error. That happens when every episode of the step
    ended by an env error (``+gem.on_env_error=end``) or rejection sampling dropped
    every token.

    Raises:
        RLInputError: No token of the batch is in ``response_mask``.
    """
    if len(batch_keys) and not bool(response_mask.bool().any()):
        raise RLInputError(
            f"no trainable token in this step's {len(batch_keys)} samples (response_mask is all 0): verl's loss would "
            "be 0/0 = NaN and ruin the weights. Every episode ended by an env error (see the gem/env_errors warning: "
            "fix the env, or +gem.on_env_error=raise to stop at the first), or "
            "algorithm.rollout_correction.rollout_rs rejected every token (loosen rollout_rs_threshold)"
        )


def env_error_metrics(extra_fields: Sequence[Any]) -> dict[str, float]:
    """``{"gem/env_errors": n}`` from the batch's per-sample ``extra_fields``; logs the batch's one warning.

    Counts episodes (a per-transition episode's first sample), so the transition layout's
    many samples per episode count once.
    """
    summaries = [
        fields["gem"]
        for fields in extra_fields
        if isinstance(fields, dict) and isinstance(fields.get("gem"), dict) and not fields.get("gem_turn_index")
    ]
    report = env_error_report(summaries)
    if report is not None:
        _logger.warning("gem_verl: %s", report)
    return {ENV_ERRORS_METRIC: float(sum(failed_by_env(s) for s in summaries))}


def install(trainer_base: ModuleType) -> None:
    """Wrap ``trainer_base``'s advantage path for ``rebn`` (idempotent)."""
    original = trainer_base.compute_advantage_for_multi_trajectories
    if getattr(original, "__gem_verl_hook__", False):
        return

    @functools.wraps(original)
    def compute_advantage_for_multi_trajectories(
        data: Any, batch_keys: list[str], adv_estimator: Any, **kwargs: Any
    ) -> Any:
        check_trainable(data.batch["response_mask"], batch_keys)
        if str(getattr(adv_estimator, "value", adv_estimator)) != ESTIMATOR_NAME:
            return original(data, batch_keys=batch_keys, adv_estimator=adv_estimator, **kwargs)
        mask = data.batch["response_mask"]
        turn_ids = None
        try:
            stored = trainer_base.tq.kv_batch_get(
                keys=list(batch_keys), partition_id=_PARTITION.get(), select_fields=[TURN_IDS_FIELD]
            )
            turn_ids = padded_turn_ids(stored[TURN_IDS_FIELD], mask.shape[1])
        except Exception:  # samples of another agent loop: no stored boundaries
            _logger.warning("rebn: no %s stored with these samples; using response_mask runs", TURN_IDS_FIELD)
        advantages, returns = compute_rebn_advantage(
            data.batch["token_level_rewards"], mask, config=kwargs.get("config"), turn_ids=turn_ids
        )
        data.batch["advantages"] = advantages
        data.batch["returns"] = returns
        return data

    compute_advantage_for_multi_trajectories.__gem_verl_hook__ = True  # type: ignore[attr-defined]
    trainer_base.compute_advantage_for_multi_trajectories = compute_advantage_for_multi_trajectories

    trainer_cls = trainer_base.PPOTrainer
    method = trainer_cls._compute_advantage

    @functools.wraps(method)
    def _compute_advantage(self: Any, batch: Any, metrics: dict[str, Any]) -> Any:
        token = _PARTITION.set(str(getattr(batch, "partition_id", "train")))
        try:
            return method(self, batch, metrics)
        finally:
            _PARTITION.reset(token)

    trainer_cls._compute_advantage = _compute_advantage

    compute_metrics = trainer_cls._compute_metrics

    @functools.wraps(compute_metrics)
    def _compute_metrics(self: Any, batch: Any, metrics: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        result = compute_metrics(self, batch, metrics, *args, **kwargs)
        stored = trainer_base.tq.kv_batch_get(
            keys=list(batch.keys), partition_id=batch.partition_id, select_fields=["extra_fields"]
        )
        fields = stored.pop("extra_fields")  # as verl's own metrics step reads it
        metrics.update(env_error_metrics(fields.tolist() if hasattr(fields, "tolist") else list(fields)))
        return result

    trainer_cls._compute_metrics = _compute_metrics
