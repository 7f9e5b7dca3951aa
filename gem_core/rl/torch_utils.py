"""Optional torch helpers for adapters: padded batches of sequences, distributed ReBN, off-policy corrections.

torch is not a dependency of gem_core: this module imports it when a function runs,
so importing :mod:`gem_core.rl` never needs it. The math stays the numpy code in
:mod:`gem_core.rl.advantages`; these helpers only move data and gather statistics.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from gem_core.errors import RLInputError
from gem_core.rl.advantages import Moments, stats_from_moments
from gem_core.rl.layouts import EpisodeSequence
from gem_core.rl.offpolicy import LOG_RATIO_BOUND, OffPolicyConfig

__all__ = ["all_reduce_moments", "off_policy_correction_tensor", "pad_sequences", "rebn_tensor", "torch_moments"]


def _torch() -> Any:
    try:
        return importlib.import_module("torch")
    except ImportError as exc:  # pragma: no cover - exercised only without torch
        raise ImportError("gem_core.rl.torch_utils needs torch; install a torch build for your platform") from exc


def pad_sequences(
    sequences: Sequence[EpisodeSequence], pad_token_id: int, *, padding_side: str = "right", device: Any = None
) -> dict[str, Any]:
    """Pad per-episode sequences into one batch of tensors.

    Args:
        sequences: Output of :func:`~gem_core.rl.layouts.episodes_to_sequences`.
        pad_token_id: Id written into padding positions of ``input_ids``.
        padding_side: ``"right"`` (training) or ``"left"``.
        device: Where to put the tensors.

    Returns:
        ``input_ids`` and ``attention_mask`` (int64), ``loss_mask`` (bool), ``token_rewards``
        (float32) and, when every sequence has them, ``token_advantages`` and
        ``token_logprobs`` (float32) and ``token_policy_versions`` (int64, -1 off generated
        tokens and on padding); all shaped ``[batch, longest]``, zero-padded.
    """
    torch = _torch()
    if padding_side not in ("right", "left"):
        raise RLInputError(f"padding_side must be 'right' or 'left', got {padding_side!r}")
    if not sequences:
        raise RLInputError("pad_sequences needs at least one sequence")
    width = max(s.num_tokens for s in sequences)
    fields: dict[str, list[Any]] = {"input_ids": [s.input_ids for s in sequences]}
    fields["attention_mask"] = [np.ones(s.num_tokens, dtype=np.int64) for s in sequences]
    fields["loss_mask"] = [s.loss_mask for s in sequences]
    fields["token_rewards"] = [s.token_rewards for s in sequences]
    if all(s.token_advantages is not None for s in sequences):
        fields["token_advantages"] = [s.token_advantages for s in sequences]
    if all(s.token_logprobs is not None for s in sequences):
        fields["token_logprobs"] = [s.token_logprobs for s in sequences]
    if all(s.token_policy_versions is not None for s in sequences):
        fields["token_policy_versions"] = [s.token_policy_versions for s in sequences]
    dtypes = {"input_ids": np.int64, "attention_mask": np.int64, "loss_mask": np.bool_}
    dtypes["token_policy_versions"] = np.int64
    fills = {"input_ids": pad_token_id, "token_policy_versions": -1}
    out: dict[str, Any] = {}
    for name, rows in fields.items():
        dtype = dtypes.get(name, np.float32)
        fill = fills.get(name, 0)
        batch: np.ndarray[Any, Any] = np.full((len(rows), width), fill, dtype=dtype)
        for i, row in enumerate(rows):
            if padding_side == "right":
                batch[i, : len(row)] = row
            else:
                batch[i, width - len(row) :] = row
        out[name] = torch.from_numpy(batch).to(device) if device is not None else torch.from_numpy(batch)
    return out


def torch_moments(values: Any, shift: float = 0.0) -> Any:
    """Float64 ``[sum, sum_sq, count]`` of ``values - shift``, on the tensor's device, ready for ``all_reduce``."""
    torch = _torch()
    x = values.detach().to(torch.float64).reshape(-1) - shift
    return torch.stack([x.sum(), (x * x).sum(), torch.tensor(float(x.numel()), dtype=torch.float64, device=x.device)])


def _sum_over_ranks(stats: Any, group: Any) -> Any:
    dist = _torch().distributed
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(stats, op=dist.ReduceOp.SUM, group=group)
    return stats


def all_reduce_moments(values: Any, group: Any = None, *, shift: float = 0.0) -> Moments:
    """Sum, sum of squares and count of ``values - shift`` over all ranks (this rank only if not distributed).

    The three numbers are reduced in float64 in one ``all_reduce`` call.
    """
    total, total_sq, count = (float(v) for v in _sum_over_ranks(torch_moments(values, shift), group).tolist())
    return Moments(total, total_sq, round(count))


def rebn_tensor(
    returns: Any, *, eps: float = 1e-9, unbiased: bool = False, distributed: bool = True, group: Any = None
) -> Any:
    """ReBN on a tensor of per-transition returns, optionally with statistics from every rank.

    Two float64 all-reduces: sums and counts give the global mean, then the moments are
    taken around it, so the variance does not cancel (see
    :func:`~gem_core.rl.advantages.stats_from_moments`). Exact zeros when all returns
    (on all ranks) are equal; the result has the input's dtype and device.

    Args:
        returns: Any-shaped floating tensor; every element is one transition's return.
        eps: Added to the std.
        unbiased: Bessel-corrected std.
        distributed: All-reduce the moments when ``torch.distributed`` is initialised.
        group: Process group for the all-reduce.
    """
    torch = _torch()
    if not torch.is_floating_point(returns):
        returns = returns.to(torch.float32)
    if not bool(torch.isfinite(returns).all()):
        raise RLInputError("returns hold NaN or inf; fix the rewards before computing advantages")
    first = torch_moments(returns)
    if distributed:
        first = _sum_over_ranks(first, group)
    total, _, count = (float(v) for v in first.tolist())
    if count == 0:
        return returns.clone()
    shift = total / count
    second = torch_moments(returns, shift)
    if distributed:
        second = _sum_over_ranks(second, group)
    centered_total, centered_sq, _ = (float(v) for v in second.tolist())
    # Around the mean, equal returns give E[d^2] ~ E[d]^2 ~ rounding noise, which the relative test reads as 0.
    _, std = stats_from_moments(centered_total, centered_sq, round(count), unbiased=unbiased, shift=shift)
    if std == 0.0:
        return torch.zeros_like(returns)
    # Centre in the shifted frame (shift + mean_d may not be representable for returns a few ulps apart).
    centered = (returns.detach().to(torch.float64) - shift) - centered_total / round(count)
    return (centered / (std + eps)).to(returns.dtype)


def _outside_tensor(values: Any, low: float | None, high: float | None) -> Any:
    torch = _torch()
    out = torch.zeros_like(values, dtype=torch.bool)
    if low is not None:
        out |= values < low
    if high is not None:
        out |= values > high
    return out


def off_policy_correction_tensor(
    current_logprobs: Any,
    behaviour_logprobs: Any,
    loss_mask: Any,
    config: OffPolicyConfig,
    *,
    segment_ids: Any = None,
) -> tuple[Any, Any]:
    """:func:`gem_core.rl.offpolicy.correct` on a padded ``[batch, length]`` batch, in float64.

    Args:
        current_logprobs: The trainer's log-probabilities (padding is never read).
        behaviour_logprobs: The sampling policy's log-probabilities.
        loss_mask: Nonzero on the tokens the loss trains on.
        config: Which corrections (:class:`~gem_core.rl.offpolicy.OffPolicyConfig`).
        segment_ids: Optional integer tensor of the same shape: tokens of one row with the
            same id ``>= 0`` form one sequence for the sequence-level TIS and masks (e.g.
            verl's ``gem_turn_ids`` for turn by turn); loss tokens with a negative id are
            dropped. ``None``: each row is one sequence.

    Returns:
        ``(weights, keep)``: weights in ``current_logprobs``' dtype (multiply the per-token
        advantages or loss), and the new boolean loss mask. Both are detached.

    Raises:
        RLInputError: Shapes differ, or a log-probability on a loss token is not finite or positive.
    """
    torch = _torch()
    current = current_logprobs.detach()
    if not current.shape == behaviour_logprobs.shape == loss_mask.shape or current.dim() != 2:
        raise RLInputError(
            f"current_logprobs {tuple(current.shape)}, behaviour_logprobs {tuple(behaviour_logprobs.shape)} and "
            f"loss_mask {tuple(loss_mask.shape)} must be the same [batch, length] shape"
        )
    mask = loss_mask.bool()
    cur = current.to(torch.float64)
    beh = behaviour_logprobs.detach().to(torch.float64)
    for name, values in (("current_logprobs", cur), ("behaviour_logprobs", beh)):
        on = values[mask]
        if not bool(torch.isfinite(on).all()):
            raise RLInputError(f"{name} hold NaN or inf on loss tokens; logprobs must be finite there")
        if on.numel() and float(on.max()) > 1e-6:
            raise RLInputError(f"{name} hold a value > 0 on a loss token: not log-probabilities")
    log_ratios = torch.where(mask, cur - beh, torch.zeros_like(cur))
    ratios = torch.exp(log_ratios.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    segments = torch.zeros_like(mask, dtype=torch.int64) if segment_ids is None else segment_ids.to(torch.int64)
    if segments.shape != mask.shape:
        raise RLInputError(f"segment_ids {tuple(segments.shape)} must have the shape of loss_mask {tuple(mask.shape)}")
    keep = mask & (segments >= 0) & ~_outside_tensor(ratios, config.token_mask_low, config.token_mask_high)
    per_row = int(segments.max()) + 1 if segments.numel() and int(segments.max()) >= 0 else 1
    rows = torch.arange(mask.shape[0], device=mask.device).unsqueeze(1)
    index = rows * per_row + segments.clamp(min=0)  # one slot per (row, segment)
    slots = mask.shape[0] * per_row

    def per_segment(values: Any, where: Any) -> Any:
        total = torch.zeros(slots, dtype=torch.float64, device=mask.device)
        return total.scatter_add(0, index[where], values[where].to(torch.float64))

    if config.outlier_low is not None or config.outlier_high is not None:
        bad = mask & (segments >= 0) & _outside_tensor(ratios, config.outlier_low, config.outlier_high)
        keep &= per_segment(torch.ones_like(ratios), bad)[index] == 0
    log_sum = per_segment(log_ratios, keep)
    if config.sequence_mask is not None:
        statistic = log_sum
        if config.sequence_mask == "geometric":
            statistic = log_sum / per_segment(torch.ones_like(ratios), keep).clamp(min=1.0)
        statistic = torch.exp(statistic.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
        keep &= ~_outside_tensor(statistic, config.sequence_mask_low, config.sequence_mask_high)[index]
    if config.tis == "token":
        weights = ratios.clamp(max=config.tis_cap)
    elif config.tis == "sequence":
        weights = torch.exp(log_sum.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)).clamp(max=config.tis_cap)[index]
    else:
        weights = torch.ones_like(ratios)
    weights = torch.where(keep, weights, torch.zeros_like(weights))
    out_dtype = current.dtype if torch.is_floating_point(current) else torch.float32
    return weights.to(out_dtype), keep
