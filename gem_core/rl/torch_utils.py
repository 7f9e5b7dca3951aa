"""Optional torch helpers for adapters: padded batches of sequences and distributed ReBN.

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

__all__ = ["all_reduce_moments", "pad_sequences", "rebn_tensor", "torch_moments"]


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
        ``token_logprobs`` (float32); all shaped ``[batch, longest]``, zero-padded.
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
    dtypes = {"input_ids": np.int64, "attention_mask": np.int64, "loss_mask": np.bool_}
    out: dict[str, Any] = {}
    for name, rows in fields.items():
        dtype = dtypes.get(name, np.float32)
        fill = pad_token_id if name == "input_ids" else 0
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
