"""Off-policy corrections: importance ratios of the current policy to the behaviour policy, truncated and masked.

An asynchronous trainer learns from tokens another policy version sampled (the
behaviour policy ``mu``: the inference engine's weights at sampling time, recorded per
token as ``Turn.action_logprobs`` and ``Turn.policy_versions``). The per-token ratio

    r_t = pi(y_t | ...) / mu(y_t | ...) = exp(logp_current_t - logp_behaviour_t)

corrects for it. Raw ratios have unbounded variance, so trainers truncate or mask them.
This module implements the options verl's rollout correction
(``algorithm.rollout_correction``) and SkyRL's ``off_policy_correction`` ship, under the
names below (see ``docs/rl.md``, "Off-policy corrections", for the mapping):

* **token TIS** (truncated importance sampling): ``w_t = min(r_t, C)``;
* **sequence TIS**: ``w = min(prod_t r_t, C)`` on every token of the sequence;
* **token mask**: a token whose ``r_t`` is outside ``[token_mask_low, token_mask_high]``
  leaves the loss (masked importance sampling, "IcePop");
* **outlier mask**: a sequence with *any* token outside ``[outlier_low, outlier_high]``
  leaves the loss as a whole;
* **sequence mask**: a sequence whose ``prod_t r_t`` (``"product"``) or geometric mean
  ``exp(mean_t log r_t)`` (``"geometric"``) is outside ``[sequence_mask_low, sequence_mask_high]``
  leaves the loss as a whole.

A correction is two per-token arrays: ``weights`` (the truncated IS weight on kept
tokens, 0 on dropped ones; 1 on kept tokens without TIS) and ``keep`` (the new loss
mask). Both are stop-gradient constants, so they compose with **every** advantage
estimator by multiplication: for a weight ``w >= 0``, PPO's
``min(r A, clip(r) A) * w == min(r (w A), clip(r) (w A))``, so multiplying the per-token
advantages by ``weights`` is the same as multiplying the per-token loss (what verl and
SkyRL do). ``keep`` must replace the loss mask too: a dropped token with advantage 0
still counts in a token-mean loss's denominator otherwise.

Staleness (``current_version - policy_version`` per token, from the layouts'
``policy_versions``) gives corrections of the same shape: drop tokens or samples older
than ``max_lag``, or weigh them by ``decay ** lag``; :func:`combine` composes them.

Everything here is numpy and float64; :func:`gem_core.rl.torch_utils.off_policy_correction_tensor`
is the same math on padded torch batches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from gem_core.errors import ConfigError, RLInputError
from gem_core.rl.layouts import EpisodeSequence, TransitionSample

__all__ = [
    "LOG_RATIO_BOUND",
    "Correction",
    "OffPolicyConfig",
    "Sample",
    "combine",
    "correct",
    "correct_samples",
    "corrected_advantages",
    "correction_metrics",
    "policy_lags",
    "staleness_correction",
    "staleness_corrections",
]

#: Log-ratios (per token, and summed per sequence) are clamped to ``[-20, 20]`` before ``exp``
#: (as verl's ``SAFETY_BOUND`` and SkyRL's ``safe_exp_delta``): ``exp(20)`` is about 4.9e8, no overflow.
LOG_RATIO_BOUND = 20.0

#: A sample of either layout.
Sample = EpisodeSequence | TransitionSample

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def _threshold(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a finite number > 0 (a ratio), got {value!r}")
    return float(value)


def _bounds(prefix: str, low: float | None, high: float | None) -> None:
    _threshold(f"{prefix}_low", low)
    _threshold(f"{prefix}_high", high)
    if low is not None and high is not None and low > high:
        raise ConfigError(f"{prefix}_low={low} is above {prefix}_high={high}; nothing could be kept")


@dataclass(frozen=True, slots=True)
class OffPolicyConfig:
    """Which corrections to apply; the default applies none (every weight 1, every token kept).

    Attributes:
        tis: Truncated importance sampling: ``"token"`` (``w_t = min(r_t, tis_cap)``),
            ``"sequence"`` (``w = min(prod_t r_t, tis_cap)`` on all the sequence's tokens) or ``None``.
        tis_cap: The truncation ``C`` (> 0). verl's ``rollout_is_threshold`` (default 2.0),
            SkyRL's ``token_tis_ratio_clip_high`` / ``sequence_tis_ratio_clip_high``.
        token_mask_low: Drop a token whose ratio is below this (``None``: no lower bound).
        token_mask_high: Drop a token whose ratio is above this (``None``: no upper bound).
        outlier_low: Drop a whole sequence if any of its tokens' ratio is below this.
        outlier_high: Drop a whole sequence if any of its tokens' ratio is above this.
        sequence_mask: ``"product"`` (``prod_t r_t``), ``"geometric"`` (``exp(mean_t log r_t)``)
            or ``None``: the sequence statistic compared with the sequence bounds.
        sequence_mask_low: Drop a sequence whose statistic is below this.
        sequence_mask_high: Drop a sequence whose statistic is above this.

    Raises:
        ConfigError: An unknown mode, a threshold that is not a finite positive number, a
            lower bound above its upper bound, or a ``sequence_mask`` without bounds.
    """

    tis: Literal["token", "sequence"] | None = None
    tis_cap: float = 2.0
    token_mask_low: float | None = None
    token_mask_high: float | None = None
    outlier_low: float | None = None
    outlier_high: float | None = None
    sequence_mask: Literal["product", "geometric"] | None = None
    sequence_mask_low: float | None = None
    sequence_mask_high: float | None = None

    def __post_init__(self) -> None:
        if self.tis not in (None, "token", "sequence"):
            raise ConfigError(f"tis must be 'token', 'sequence' or None, got {self.tis!r}")
        _threshold("tis_cap", self.tis_cap)
        _bounds("token_mask", self.token_mask_low, self.token_mask_high)
        _bounds("outlier", self.outlier_low, self.outlier_high)
        _bounds("sequence_mask", self.sequence_mask_low, self.sequence_mask_high)
        if self.sequence_mask not in (None, "product", "geometric"):
            raise ConfigError(f"sequence_mask must be 'product', 'geometric' or None, got {self.sequence_mask!r}")
        if self.sequence_mask is not None and self.sequence_mask_low is None and self.sequence_mask_high is None:
            raise ConfigError(f"sequence_mask={self.sequence_mask!r} needs sequence_mask_low and/or sequence_mask_high")

    @property
    def is_identity(self) -> bool:
        """Whether no correction is configured."""
        return (
            self.tis is None
            and self.token_mask_low is None
            and self.token_mask_high is None
            and self.outlier_low is None
            and self.outlier_high is None
            and self.sequence_mask is None
        )


@dataclass(frozen=True, slots=True)
class Correction:
    """Per-token results for one sample (one row).

    Attributes:
        log_ratios: ``logp_current - logp_behaviour`` on loss tokens (unclamped), 0 elsewhere.
        weights: Multiply the token's advantage (or loss) by this: the (truncated) IS
            weight on kept tokens, 0 on dropped ones and outside the loss mask.
        keep: The new loss mask: in the old one and not dropped by a mask.
    """

    log_ratios: FloatArray
    weights: FloatArray
    keep: BoolArray

    @property
    def ratios(self) -> FloatArray:
        """``exp`` of the clamped log-ratios (1 outside the loss mask)."""
        return np.exp(np.clip(self.log_ratios, -LOG_RATIO_BOUND, LOG_RATIO_BOUND))


def _row(values: npt.ArrayLike, name: str, dtype: Any = np.float64) -> npt.NDArray[Any]:
    try:
        array = np.asarray(values, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise RLInputError(f"{name} must be numbers: {exc}") from None
    if array.ndim != 1:
        raise RLInputError(f"{name} must be one row (1-D), got shape {array.shape}")
    return array


def _check_logprobs(values: FloatArray, mask: BoolArray, name: str) -> None:
    on = values[mask]
    if not np.isfinite(on).all():
        position = int(np.flatnonzero(mask)[np.flatnonzero(~np.isfinite(on))[0]])
        raise RLInputError(f"{name}[{position}] is {values[position]} on a loss token; logprobs must be finite there")
    if on.size and float(on.max()) > 1e-6:
        position = int(np.flatnonzero(mask)[int(np.argmax(on))])
        raise RLInputError(
            f"{name}[{position}] is {values[position]} > 0 on a loss token: not a log-probability "
            "(probabilities or logits passed by mistake?)"
        )


def _segments(length: int, segments: Sequence[tuple[int, int]] | None) -> list[tuple[int, int]]:
    if segments is None:
        return [(0, length)]
    spans = [(int(a), int(b)) for a, b in segments]
    previous = 0
    for start, end in spans:
        if not previous <= start <= end <= length:
            raise RLInputError(
                f"segments must be ordered, non-overlapping (start, end) spans inside the row of {length} tokens; "
                f"got {list(segments)}"
            )
        previous = end
    return spans


def _exp(log_value: float) -> float:
    return math.exp(min(max(log_value, -LOG_RATIO_BOUND), LOG_RATIO_BOUND))


def _outside(value: FloatArray | float, low: float | None, high: float | None) -> Any:
    out = np.zeros(np.shape(value), dtype=bool)
    if low is not None:
        out |= np.asarray(value) < low
    if high is not None:
        out |= np.asarray(value) > high
    return out


def correct(
    current_logprobs: npt.ArrayLike,
    behaviour_logprobs: npt.ArrayLike,
    loss_mask: npt.ArrayLike,
    config: OffPolicyConfig,
    *,
    segments: Sequence[tuple[int, int]] | None = None,
) -> Correction:
    """The off-policy correction of one sample.

    Steps, on the loss tokens (``loss_mask == 1``) only; everything else has weight 0
    and is not kept:

    1. ``log r_t = current_t - behaviour_t``; ``r_t = exp(clamp(log r_t, -20, 20))``.
    2. Token mask: drop tokens with ``r_t`` outside ``[token_mask_low, token_mask_high]``.
    3. Outlier mask: drop a sequence any of whose loss tokens (before step 2) is outside
       ``[outlier_low, outlier_high]``.
    4. Sequence statistics over the tokens still kept: ``log R = sum_t log r_t`` (product)
       or its mean (geometric), ``exp`` clamped like a token's. Sequence mask: drop a
       sequence whose statistic is outside its bounds.
    5. Weights: token TIS ``min(r_t, C)``, sequence TIS ``min(R_product, C)``, else 1; 0
       on dropped tokens.

    A "sequence" is the whole row, or each of ``segments`` (e.g. the turn spans of an
    :class:`~gem_core.rl.layouts.EpisodeSequence`, so that a per-episode row is
    corrected turn by turn as the per-transition layout would be).

    Args:
        current_logprobs: The trainer's log-probabilities of the row's tokens (any value
            off the loss mask: padding is never read).
        behaviour_logprobs: The sampling policy's log-probabilities (``Turn.action_logprobs``,
            the layouts' ``token_logprobs`` / ``response_logprobs``).
        loss_mask: 1 on the tokens the loss trains on.
        config: Which corrections.
        segments: ``(start, end)`` spans, each one sequence for steps 3-5; loss tokens
            outside every span are dropped. ``None``: the row is one sequence.

    Raises:
        RLInputError: Shapes differ, a log-probability on a loss token is not finite or
            is positive, or ``segments`` are not ordered spans inside the row.
    """
    current = _row(current_logprobs, "current_logprobs")
    behaviour = _row(behaviour_logprobs, "behaviour_logprobs")
    mask = _row(loss_mask, "loss_mask").astype(bool)
    if not current.shape == behaviour.shape == mask.shape:
        raise RLInputError(
            f"current_logprobs {current.shape}, behaviour_logprobs {behaviour.shape} and loss_mask {mask.shape} "
            "must have one entry per token each"
        )
    _check_logprobs(current, mask, "current_logprobs")
    _check_logprobs(behaviour, mask, "behaviour_logprobs")
    log_ratios = np.zeros_like(current)
    log_ratios[mask] = current[mask] - behaviour[mask]  # padding may hold inf/NaN: never read it
    ratios = np.exp(np.clip(log_ratios, -LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    keep = mask & ~_outside(ratios, config.token_mask_low, config.token_mask_high)
    weights = np.zeros_like(ratios)
    covered = np.zeros_like(mask)
    for start, end in _segments(len(mask), segments):
        covered[start:end] = True
        span = slice(start, end)
        if (config.outlier_low is not None or config.outlier_high is not None) and bool(
            _outside(ratios[span][mask[span]], config.outlier_low, config.outlier_high).any()
        ):
            keep[span] = False
            continue
        kept = keep[span]
        log_sum = float(log_ratios[span][kept].sum())
        if config.sequence_mask is not None:
            count = int(kept.sum())
            statistic = _exp(log_sum if config.sequence_mask == "product" else log_sum / max(count, 1))
            if bool(_outside(statistic, config.sequence_mask_low, config.sequence_mask_high)):
                keep[span] = False
                continue
        if config.tis == "token":
            weights[span] = np.minimum(ratios[span], config.tis_cap)
        elif config.tis == "sequence":
            weights[span] = min(_exp(log_sum), config.tis_cap)
        else:
            weights[span] = 1.0
    keep &= covered
    weights[~keep] = 0.0
    return Correction(log_ratios=log_ratios, weights=weights, keep=keep)


def combine(*corrections: Correction) -> Correction:
    """Compose corrections of one row: weights multiply, a token is kept iff every one keeps it.

    ``log_ratios`` are the first's (the importance-sampling one, by convention).
    """
    if not corrections:
        raise RLInputError("combine needs at least one correction")
    first = corrections[0]
    weights = first.weights.copy()
    keep = first.keep.copy()
    for other in corrections[1:]:
        if other.keep.shape != keep.shape:
            raise RLInputError(f"cannot combine corrections of {keep.shape} and {other.keep.shape} tokens")
        weights *= other.weights
        keep &= other.keep
    weights[~keep] = 0.0
    return Correction(log_ratios=first.log_ratios, weights=weights, keep=keep)


# --------------------------------------------------------------------------- samples of both layouts


def _behaviour(sample: Sample) -> tuple[FloatArray, BoolArray]:
    if isinstance(sample, EpisodeSequence):
        if sample.token_logprobs is None:
            raise RLInputError(
                f"episode {sample.episode_id!r} has no token_logprobs (behaviour logprobs): some turn did not record "
                "action_logprobs; ask the inference server for logprobs (vLLM: logprobs=0/1)"
            )
        return sample.token_logprobs, sample.loss_mask.astype(bool)
    if sample.response_logprobs is None:
        raise RLInputError(
            f"turn {sample.turn_index} of episode {sample.episode_id!r} has no response_logprobs"
            + (" (its ids were re-encoded from text)" if sample.retokenized else "")
        )
    return np.asarray(sample.response_logprobs, dtype=np.float64), np.ones(len(sample.response_ids), dtype=bool)


def _response_part(sample: Sample, values: npt.ArrayLike, name: str, index: int) -> FloatArray:
    array = _row(values, f"{name}[{index}]")
    expected = sample.num_tokens if isinstance(sample, EpisodeSequence) else len(sample.response_ids)
    if array.shape[0] != expected:
        what = "input_ids" if isinstance(sample, EpisodeSequence) else "response_ids"
        raise RLInputError(f"{name}[{index}] has {array.shape[0]} entries for {expected} {what} of sample {index}")
    return array


def correct_samples(
    samples: Sequence[Sample],
    current_logprobs: Sequence[npt.ArrayLike],
    config: OffPolicyConfig,
    *,
    unit: Literal["sample", "turn"] = "sample",
) -> list[Correction]:
    """:func:`correct` for samples of either layout, against their recorded behaviour logprobs.

    Args:
        samples: :class:`~gem_core.rl.layouts.EpisodeSequence` s (``current_logprobs[i]``
            has one entry per ``input_ids`` token) or
            :class:`~gem_core.rl.layouts.TransitionSample` s (one per ``response_ids`` token).
        current_logprobs: The trainer's log-probabilities, one row per sample.
        config: Which corrections.
        unit: What a "sequence" is for sequence-level TIS and masks: ``"sample"`` (an
            episode in the per-episode layout, a turn in the per-transition one) or
            ``"turn"`` (each turn's generated tokens: both layouts then agree token for token).

    Returns:
        One :class:`Correction` per sample, shaped like its ``current_logprobs`` row.
    """
    if unit not in ("sample", "turn"):
        raise RLInputError(f"unit must be 'sample' or 'turn', got {unit!r}")
    if len(current_logprobs) != len(samples):
        raise RLInputError(f"got current_logprobs for {len(current_logprobs)} samples, but {len(samples)} samples")
    out: list[Correction] = []
    for index, (sample, current) in enumerate(zip(samples, current_logprobs, strict=True)):
        behaviour, mask = _behaviour(sample)
        row = _response_part(sample, current, "current_logprobs", index)
        spans = sample.turn_spans if unit == "turn" and isinstance(sample, EpisodeSequence) else None
        out.append(correct(row, behaviour, mask, config, segments=spans))
    return out


def corrected_advantages(sample: Sample, correction: Correction) -> FloatArray:
    """The sample's per-token advantages times the correction's weights (0 on dropped tokens).

    Works with any estimator's advantages once a layout placed them on tokens
    (``token_advantages`` / ``advantage``); pair it with ``correction.keep`` as the loss mask.
    """
    if isinstance(sample, EpisodeSequence):
        if sample.token_advantages is None:
            raise RLInputError(f"episode {sample.episode_id!r} has no token_advantages; pass advantages to the layout")
        advantages = sample.token_advantages
    else:
        advantages = np.full(len(sample.response_ids), sample.advantage, dtype=np.float64)
    if advantages.shape != correction.weights.shape:
        raise RLInputError(f"{advantages.shape[0]} advantages for a correction of {correction.weights.shape[0]} tokens")
    return advantages * correction.weights


# --------------------------------------------------------------------------- staleness


def _versions(sample: Sample) -> tuple[npt.NDArray[np.int64], BoolArray]:
    if isinstance(sample, EpisodeSequence):
        versions = sample.token_policy_versions
        mask = sample.loss_mask.astype(bool)
        name = f"episode {sample.episode_id!r}"
    else:
        versions = None if sample.response_policy_versions is None else np.asarray(sample.response_policy_versions)
        mask = np.ones(len(sample.response_ids), dtype=bool)
        name = f"turn {sample.turn_index} of episode {sample.episode_id!r}"
    if versions is None:
        raise RLInputError(f"{name} records no policy versions; the rollout must set Turn.policy_versions")
    return np.asarray(versions, dtype=np.int64), mask


def policy_lags(sample: Sample, current_version: int) -> npt.NDArray[np.int64]:
    """``current_version - policy_version`` per token of the sample (0 off the loss mask).

    Raises:
        RLInputError: The sample records no versions, or a token's version is newer
            than ``current_version`` (the caller's version is wrong).
    """
    versions, mask = _versions(sample)
    lags = np.where(mask, int(current_version) - versions, 0)
    if (lags < 0).any():
        position = int(np.flatnonzero(lags < 0)[0])
        raise RLInputError(
            f"token {position} was sampled by policy version {int(versions[position])}, newer than "
            f"current_version={current_version}; pass the trainer's current policy version"
        )
    return lags.astype(np.int64)


def staleness_correction(
    sample: Sample,
    current_version: int,
    *,
    max_lag: int | None = None,
    level: Literal["token", "sample"] = "sample",
    decay: float = 1.0,
) -> Correction:
    """Drop or down-weigh tokens by their policy lag ``current_version - policy_version``.

    Args:
        sample: A sample of either layout that records ``policy_versions``.
        current_version: The version of the policy being trained.
        max_lag: Drop tokens whose lag is above this (``level="token"``), or the whole
            sample if any token's is (``level="sample"``: a partial rollout that spans
            several versions goes or stays whole). ``None``: drop nothing.
        level: See ``max_lag``.
        decay: Weight kept tokens by ``decay ** lag`` (in ``(0, 1]``; 1 = no weighting).

    Returns:
        A :class:`Correction` (``log_ratios`` all 0) to :func:`combine` with an
        importance-sampling one.
    """
    if level not in ("token", "sample"):
        raise RLInputError(f"level must be 'token' or 'sample', got {level!r}")
    if max_lag is not None and (isinstance(max_lag, bool) or not isinstance(max_lag, int) or max_lag < 0):
        raise ConfigError(f"max_lag must be an int >= 0 or None, got {max_lag!r}")
    if not (isinstance(decay, int | float) and 0.0 < decay <= 1.0):
        raise ConfigError(f"decay must be in (0, 1], got {decay!r}")
    lags = policy_lags(sample, current_version)
    _, mask = _versions(sample)
    keep = mask.copy()
    if max_lag is not None:
        too_old = mask & (lags > max_lag)
        keep &= ~too_old if level == "token" else np.full_like(keep, not bool(too_old.any()))
    weights = np.where(keep, np.power(float(decay), lags.astype(np.float64)), 0.0)
    return Correction(log_ratios=np.zeros(len(keep)), weights=weights, keep=keep)


def staleness_corrections(
    samples: Sequence[Sample],
    current_version: int,
    *,
    max_lag: int | None = None,
    level: Literal["token", "sample"] = "sample",
    decay: float = 1.0,
) -> list[Correction]:
    """:func:`staleness_correction` over a batch."""
    return [staleness_correction(s, current_version, max_lag=max_lag, level=level, decay=decay) for s in samples]


# --------------------------------------------------------------------------- metrics


def correction_metrics(corrections: Sequence[Correction], loss_masks: Sequence[npt.ArrayLike]) -> dict[str, float]:
    """Batch diagnostics: how far the policies are apart and how much the correction removed.

    Returns:
        ``ratio_mean`` / ``ratio_max`` / ``ratio_min`` (over loss tokens), ``log_ratio_mean``
        (a k1 estimate of KL(mu || pi) with sign flipped), ``dropped_token_fraction``,
        ``dropped_sample_fraction`` (samples with loss tokens and none kept) and
        ``weight_mean`` (over kept tokens). Empty batches give 0s.
    """
    if len(corrections) != len(loss_masks):
        raise RLInputError(f"got {len(loss_masks)} loss masks for {len(corrections)} corrections")
    ratios: list[FloatArray] = []
    logs: list[FloatArray] = []
    kept_weights: list[FloatArray] = []
    tokens = dropped = samples = dropped_samples = 0
    for correction, raw_mask in zip(corrections, loss_masks, strict=True):
        mask = np.asarray(raw_mask).astype(bool)
        ratios.append(correction.ratios[mask])
        logs.append(correction.log_ratios[mask])
        kept_weights.append(correction.weights[correction.keep])
        tokens += int(mask.sum())
        dropped += int((mask & ~correction.keep).sum())
        if mask.any():
            samples += 1
            dropped_samples += int(not correction.keep[mask].any())
    all_ratios = np.concatenate(ratios) if ratios else np.zeros(0)
    all_logs = np.concatenate(logs) if logs else np.zeros(0)
    all_weights = np.concatenate(kept_weights) if kept_weights else np.zeros(0)
    return {
        "ratio_mean": float(all_ratios.mean()) if all_ratios.size else 0.0,
        "ratio_max": float(all_ratios.max()) if all_ratios.size else 0.0,
        "ratio_min": float(all_ratios.min()) if all_ratios.size else 0.0,
        "log_ratio_mean": float(all_logs.mean()) if all_logs.size else 0.0,
        "dropped_token_fraction": dropped / tokens if tokens else 0.0,
        "dropped_sample_fraction": dropped_samples / samples if samples else 0.0,
        "weight_mean": float(all_weights.mean()) if all_weights.size else 0.0,
    }
