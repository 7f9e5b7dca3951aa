"""Advantage estimators over a batch of episodes: ReBN, REINFORCE, GRPO, Dr. GRPO, RLOO, REINFORCE++.

Turn-level estimators take a batch (``Episode`` records or per-turn reward arrays) and
return one float64 array per episode with one advantage per turn; a sample layout
(:mod:`gem_core.rl.layouts`) then puts each turn's advantage on that turn's tokens.
:func:`reinforce_pp_advantages` is token-level and works on the per-episode sequences.

Numerical contract of every normalisation here:

* moments are computed in float64, whatever the input dtype;
* no spread (every value equal, a one-element batch, or a one-element group) gives
  advantages of exactly 0, never NaN or inf. Functions that see the values
  (:func:`rebn`, :func:`normalize`, the estimators) test equality exactly; the
  moments form (:func:`rebn_from_moments`) cannot, and treats a variance at or below
  ``VAR_RTOL`` times the mean square as zero (see :func:`stats_from_moments`);
* the result has the input's floating dtype (float64 for integer or list input).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gem_core.errors import RLInputError
from gem_core.rl.returns import FloatArray, RewardBatch, batch_returns, check_gamma
from gem_core.rl.types import Episode

__all__ = [
    "ESTIMATORS",
    "VAR_RTOL",
    "Moments",
    "dr_grpo_advantages",
    "estimate_advantages",
    "grpo_advantages",
    "moments",
    "normalize",
    "rebn",
    "rebn_advantages",
    "rebn_from_moments",
    "reinforce_advantages",
    "reinforce_pp_advantages",
    "rloo_advantages",
    "stats_from_moments",
]

#: In the moments form, a variance at or below ``VAR_RTOL * mean((x - shift)**2)`` counts as zero:
#: float64 sums of many equal values cancel to ~1e-14 of the mean square, not to 0.
VAR_RTOL = 1e-12


@dataclass(frozen=True, slots=True)
class Moments:
    """Sufficient statistics of ``x - shift``; add them across ranks to get global ones."""

    total: float
    total_sq: float
    count: int

    def __add__(self, other: Moments) -> Moments:
        return Moments(self.total + other.total, self.total_sq + other.total_sq, self.count + other.count)


def _as_float_array(values: npt.ArrayLike, name: str) -> tuple[FloatArray, np.dtype[Any]]:
    """Return ``values`` as float64 plus the dtype the result should have."""
    raw = np.asarray(values)
    out_dtype: np.dtype[Any] = raw.dtype if np.issubdtype(raw.dtype, np.floating) else np.dtype(np.float64)
    try:
        array = raw.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise RLInputError(f"{name} must be numbers: {exc}") from None
    if not np.isfinite(array).all():
        raise RLInputError(f"{name} holds NaN or inf; fix the rewards before computing advantages")
    return array, out_dtype


def moments(values: npt.ArrayLike, *, shift: float = 0.0) -> Moments:
    """Float64 sum, sum of squares and count of ``values - shift`` (any shape, flattened).

    ``shift`` should be the same on every rank; a value near the mean (e.g. from a
    first all-reduce of sums and counts) keeps the variance exact, see :func:`stats_from_moments`.
    """
    array, _ = _as_float_array(values, "values")
    centered = array - float(shift)
    return Moments(float(centered.sum()), float(np.square(centered).sum()), int(array.size))


def stats_from_moments(
    total: float,
    total_sq: float,
    count: int,
    *,
    unbiased: bool = False,
    shift: float = 0.0,
    var_rtol: float = VAR_RTOL,
) -> tuple[float, float]:
    """Mean and standard deviation from sufficient statistics of ``x - shift``, in float64.

    ``E[d^2] - E[d]^2`` (with ``d = x - shift``) cancels when the spread is small next
    to ``|E[d]|``: float64 keeps about 1e-14 of ``E[d^2]``. So a variance at or below
    ``var_rtol * E[d^2]`` is taken as zero, and returns whose spread is below ~1e-6 of
    their magnitude read as equal unless ``shift`` is near the mean. A slightly negative
    difference is clamped, never square-rooted (the NaN oat's float32 version hits).

    Args:
        total: Sum of ``x - shift`` (all ranks).
        total_sq: Sum of ``(x - shift)**2`` (all ranks).
        count: How many values (all ranks).
        unbiased: Divide the variance by ``count - 1`` (Bessel) instead of ``count``.
        shift: The shift the sums were taken with.
        var_rtol: Relative variance below which the spread counts as zero.

    Returns:
        ``(mean, std)``; ``std`` is exactly 0.0 when the spread is zero or undefined
        (``count == 1`` with ``unbiased``).

    Raises:
        RLInputError: ``count < 1`` or non-finite sums (pass float64 sums, not float32).
    """
    n = int(count)
    if n < 1:
        raise RLInputError(f"count must be >= 1, got {count}")
    s, ss = float(total), float(total_sq)
    if not (math.isfinite(s) and math.isfinite(ss)) or ss < 0:
        raise RLInputError(f"sum={total} and sum_sq={total_sq} must be finite (and sum_sq >= 0)")
    mean_d = s / n
    mean_sq = ss / n
    var = max(mean_sq - mean_d * mean_d, 0.0)
    mean = float(shift) + mean_d
    if var <= var_rtol * mean_sq or (unbiased and n == 1):
        return mean, 0.0
    if unbiased:
        var *= n / (n - 1)
    return mean, math.sqrt(var)


def _normalize_float64(x: FloatArray, *, eps: float, unbiased: bool, scale: bool) -> FloatArray:
    """``(x - mean) / (std + eps)`` (or ``x - mean``) over all of ``x``: zero-mean to the last rounding, finite.

    The mean of values a few ulps apart is not representable (it rounds onto one of them,
    giving one-sided "advantages" such as ``[-1.41, 0]``), so nothing is centred at the
    values' own scale. Differences from the minimum are exact for values within a factor
    2 of it (Sterbenz), so a one-ulp or subnormal spread survives; scaled to ``[0, 1]`` by
    the spread, their mean is resolved, and a second centring pass takes out the first
    pass's rounding. The result sums to zero up to one rounding per element.
    """
    if x.size == 0:
        return np.array(x, dtype=np.float64)
    low, high = float(x.min()), float(x.max())
    if low == high:
        # Equal values: an exact test, since x - mean(x) would be rounding noise, not 0.
        return np.zeros_like(x)
    back = 1.0
    if not math.isfinite(high - low):  # a spread past the float range: halve everything (exact) and scale back
        x, low, high, eps, back = x * 0.5, low * 0.5, high * 0.5, eps * 0.5, 2.0
    spread = high - low
    unit = (x - low) / spread  # in [0, 1], both ends reached
    centered = unit - float(unit.mean())
    centered -= float(centered.mean())  # the rounding of the first pass
    if not scale:
        return centered * spread * back
    var = float(np.square(centered).mean())  # > 0: the unit values span [0, 1]
    if unbiased:
        var *= x.size / (x.size - 1)
    # (x - mean) / (std + eps) == centered / (std_unit + eps / spread); eps / spread may be inf for a
    # subnormal spread, and the quotient is then exactly 0 (zero-mean), never NaN.
    return centered / (math.sqrt(var) + eps / spread)


def normalize(
    values: npt.ArrayLike,
    *,
    eps: float = 1e-9,
    unbiased: bool = False,
    scale: bool = True,
) -> npt.NDArray[np.floating[Any]]:
    """Normalise all ``values`` together: ``(x - mean) / (std + eps)``.

    Args:
        values: Any shape; statistics are over every element.
        eps: Added to the standard deviation.
        unbiased: Bessel-corrected std (torch's default) instead of the population std.
        scale: Divide by ``std + eps``; ``False`` only subtracts the mean.

    Returns:
        An array of the same shape, in the input's floating dtype (float64 otherwise).
        Exactly zeros when the values have no spread (see the module docstring).
    """
    array, out_dtype = _as_float_array(values, "values")
    if eps < 0 or not math.isfinite(eps):
        raise RLInputError(f"eps must be a finite number >= 0, got {eps}")
    flat = array.reshape(-1)
    out = _normalize_float64(flat, eps=eps, unbiased=unbiased, scale=scale)
    return out.reshape(array.shape).astype(out_dtype, copy=False)


def rebn(returns: npt.ArrayLike, *, eps: float = 1e-9, unbiased: bool = False) -> npt.NDArray[np.floating[Any]]:
    """Return Batch Normalisation: normalise the returns of all transitions in the batch.

    ``A = (G - mean(G)) / (std(G) + eps)`` over every element of ``returns``. This is
    the GEM paper's ReBN (Eq. 4); ``unbiased=False`` matches oat's population std,
    ``unbiased=True`` the torch ``.std()`` GEM's verl example uses.

    Returns:
        Same shape and floating dtype as ``returns``; all zeros when every return is
        equal (e.g. a batch of format errors) or the batch has one element.

    Example:
        >>> np.round(rebn([0.0, 1.0]), 6).tolist()
        [-1.0, 1.0]
    """
    return normalize(returns, eps=eps, unbiased=unbiased)


def rebn_from_moments(
    returns: npt.ArrayLike,
    total: float,
    total_sq: float,
    count: int,
    *,
    eps: float = 1e-9,
    unbiased: bool = False,
    shift: float = 0.0,
) -> npt.NDArray[np.floating[Any]]:
    """ReBN with statistics gathered elsewhere, e.g. all-reduced across data-parallel ranks.

    Each rank calls :func:`moments` on its local returns, the trainer sums the three
    numbers over ranks (in float64), and each rank normalises its own returns with
    the global statistics::

        local = moments(my_returns)
        total, total_sq, count = all_reduce_sum([local.total, local.total_sq, local.count])
        advantages = rebn_from_moments(my_returns, total, total_sq, count)

    For returns whose spread is tiny next to their size, first all-reduce sums and
    counts to get the mean, then pass it as ``shift`` to both :func:`moments` and this
    function (two small all-reduces; :func:`gem_core.rl.torch_utils.rebn_tensor` does so).
    With global moments equal to the local ones the result equals :func:`rebn` to rounding.
    """
    array, out_dtype = _as_float_array(returns, "returns")
    _, std = stats_from_moments(total, total_sq, count, unbiased=unbiased, shift=shift)
    if std == 0.0:
        return np.zeros(array.shape, dtype=out_dtype)
    # Centre in the shifted frame: shift + mean_d may not be representable (returns a few ulps apart),
    # while (x - shift) is exact near the shift and mean_d is resolved there.
    out = ((array - float(shift)) - float(total) / int(count)) / (std + eps)
    return out.astype(out_dtype, copy=False)


# --------------------------------------------------------------------------- turn-level estimators


def _split(flat: npt.NDArray[Any], lengths: Sequence[int]) -> list[FloatArray]:
    return [np.asarray(part, dtype=np.float64) for part in np.split(flat, np.cumsum(lengths)[:-1])] if lengths else []


def reinforce_advantages(batch: RewardBatch, gamma: float = 1.0) -> list[FloatArray]:
    """Vanilla REINFORCE: the advantage of turn ``t`` is its return ``G_t``, no baseline."""
    return batch_returns(batch, gamma)


def rebn_advantages(
    batch: RewardBatch, gamma: float = 1.0, *, eps: float = 1e-9, unbiased: bool = False
) -> list[FloatArray]:
    """REINFORCE with ReBN: per-turn returns, normalised over every turn of the batch.

    Returns:
        One array per episode, one advantage per turn.
    """
    returns = batch_returns(batch, gamma)
    if not returns:
        return []
    flat = np.concatenate(returns)
    return _split(rebn(flat, eps=eps, unbiased=unbiased), [len(r) for r in returns])


def _group_ids(batch: RewardBatch, group_ids: Sequence[Hashable] | None) -> list[Hashable]:
    if group_ids is None:
        ids: list[Hashable] = []
        for i, item in enumerate(batch):
            if not isinstance(item, Episode):
                raise RLInputError(f"batch[{i}] is a reward array, so pass group_ids (one start-state id per episode)")
            ids.append(item.start_state_id)
        return ids
    if len(group_ids) != len(batch):
        raise RLInputError(f"got {len(group_ids)} group_ids for {len(batch)} episodes; give one per episode")
    return list(group_ids)


def _episode_level(
    batch: RewardBatch,
    group_ids: Sequence[Hashable] | None,
    gamma: float,
    baseline: Callable[[FloatArray], FloatArray],
) -> list[FloatArray]:
    """Score each episode by ``G_0``, apply ``baseline`` within each group, broadcast to its turns."""
    returns = batch_returns(batch, gamma)
    for i, r in enumerate(returns):
        if r.size == 0:
            raise RLInputError(f"episode {i} has no turns; group estimators need at least one turn per episode")
    ids = _group_ids(batch, group_ids)
    scores = np.array([r[0] for r in returns], dtype=np.float64)
    advantages = np.empty_like(scores)
    members: dict[Hashable, list[int]] = {}
    for index, gid in enumerate(ids):
        members.setdefault(gid, []).append(index)
    for indices in members.values():
        advantages[indices] = baseline(scores[indices])
    return [np.full(len(r), advantages[i]) for i, r in enumerate(returns)]


def grpo_advantages(
    batch: RewardBatch,
    group_ids: Sequence[Hashable] | None = None,
    *,
    gamma: float = 1.0,
    eps: float = 1e-6,
    unbiased: bool = True,
) -> list[FloatArray]:
    """GRPO: ``(R - mean_group) / (std_group + eps)``, every turn gets its episode's value.

    ``R`` is the episode's discounted return ``G_0`` (the plain sum of rewards at the
    default ``gamma=1``). Groups are episodes with the same ``group_ids`` entry, by
    default their ``Episode.start_state_id``. The defaults (unbiased std, eps 1e-6)
    follow verl; a group of one, or of equal returns, gets 0.
    """
    return _episode_level(
        batch, group_ids, gamma, lambda s: _normalize_float64(s, eps=eps, unbiased=unbiased, scale=True)
    )


def dr_grpo_advantages(
    batch: RewardBatch, group_ids: Sequence[Hashable] | None = None, *, gamma: float = 1.0
) -> list[FloatArray]:
    """Dr. GRPO: ``R - mean_group`` with no std division (its loss also drops length normalisation)."""
    return _episode_level(
        batch, group_ids, gamma, lambda s: _normalize_float64(s, eps=0.0, unbiased=False, scale=False)
    )


def rloo_advantages(
    batch: RewardBatch, group_ids: Sequence[Hashable] | None = None, *, gamma: float = 1.0
) -> list[FloatArray]:
    """RLOO: ``R_i`` minus the mean return of the *other* episodes of its group (0 for a group of one)."""

    def leave_one_out(scores: FloatArray) -> FloatArray:
        n = scores.size
        if n == 1:
            return np.zeros(1)
        # R_i - (sum - R_i) / (n - 1) == n / (n - 1) * (R_i - mean)
        return _normalize_float64(scores, eps=0.0, unbiased=False, scale=False) * (n / (n - 1))

    return _episode_level(batch, group_ids, gamma, leave_one_out)


# --------------------------------------------------------------------------- token-level REINFORCE++


def reinforce_pp_advantages(
    token_rewards: Sequence[npt.ArrayLike],
    loss_masks: Sequence[npt.ArrayLike],
    *,
    gamma: float = 1.0,
    eps: float = 1e-8,
    unbiased: bool = True,
) -> list[FloatArray]:
    """Token-level REINFORCE++ as verl (``reinforce_plus_plus``) and OpenRLHF (``reinforce``) ship it.

    For each sequence, returns are accumulated backwards over the *generated* tokens
    (``loss_mask == 1``) with ``gamma`` applied per token, carried unchanged across
    env tokens (mask 0); then every generated token of the batch is whitened together,
    token-weighted (long responses weigh more). Compare :func:`rebn_advantages`, which
    discounts per turn and weighs each turn once.

    Args:
        token_rewards: One 1-D array per sequence; rewards sit on generated tokens
            (the layouts put each turn's reward on its last generated token).
        loss_masks: Matching 1-D arrays of 0/1.
        gamma: Per-*token* discount.
        eps: Added to the token std.
        unbiased: Bessel-corrected token std (verl's ``masked_whiten`` default).

    Returns:
        One float64 array per sequence, 0 on env tokens.

    Raises:
        RLInputError: Shapes differ, or a reward sits on an env token (mask 0).
    """
    g = check_gamma(gamma)
    if len(token_rewards) != len(loss_masks):
        raise RLInputError(f"got {len(token_rewards)} reward rows for {len(loss_masks)} masks")
    returns: list[FloatArray] = []
    masks: list[npt.NDArray[np.bool_]] = []
    for i, (rewards_row, mask_row) in enumerate(zip(token_rewards, loss_masks, strict=True)):
        r, _ = _as_float_array(rewards_row, f"token_rewards[{i}]")
        m = np.asarray(mask_row).astype(bool)
        if r.shape != m.shape or r.ndim != 1:
            raise RLInputError(f"token_rewards[{i}] has shape {r.shape} but loss_masks[{i}] has {m.shape}")
        if np.any(r[~m] != 0.0):
            pos = int(np.flatnonzero((r != 0.0) & ~m)[0])
            raise RLInputError(
                f"token_rewards[{i}][{pos}] is on an env token (loss mask 0); put rewards on generated tokens"
            )
        ret = np.zeros_like(r)
        running = 0.0
        for t in range(r.shape[0] - 1, -1, -1):
            if m[t]:
                running = float(r[t]) + g * running
                ret[t] = running
        returns.append(ret)
        masks.append(m)
    if not returns:
        return []
    selected = np.concatenate([ret[m] for ret, m in zip(returns, masks, strict=True)])
    whitened = _normalize_float64(selected, eps=eps, unbiased=unbiased, scale=True)
    out: list[FloatArray] = []
    offset = 0
    for ret, m in zip(returns, masks, strict=True):
        row = np.zeros_like(ret)
        count = int(m.sum())
        row[m] = whitened[offset : offset + count]
        offset += count
        out.append(row)
    return out


# --------------------------------------------------------------------------- by name

#: Turn-level estimators by name, for trainer configs (``algorithm.adv_estimator=rebn``).
ESTIMATORS: dict[str, Callable[..., list[FloatArray]]] = {
    "rebn": rebn_advantages,
    "reinforce": reinforce_advantages,
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "rloo": rloo_advantages,
}


#: Per-role estimators of multi-agent episodes (:mod:`gem_core.rl.roles`), by name.
ROLE_ESTIMATORS: dict[str, str] = {"role_rebn": "role_rebn_advantages", "role_grpo": "role_grpo_advantages"}


def estimate_advantages(batch: RewardBatch, estimator: str = "rebn", **kwargs: Any) -> list[FloatArray]:
    """Run a turn-level estimator by name (see :data:`ESTIMATORS` and :data:`ROLE_ESTIMATORS`); ``kwargs`` go to it.

    Raises:
        RLInputError: Unknown estimator name.
    """
    if estimator in ROLE_ESTIMATORS:  # here: gem_core.rl.roles builds on this module
        from gem_core.rl import roles

        fn: Callable[..., list[FloatArray]] = getattr(roles, ROLE_ESTIMATORS[estimator])
        return fn(batch, **kwargs)
    try:
        fn = ESTIMATORS[estimator]
    except KeyError:
        raise RLInputError(
            f"unknown advantage estimator {estimator!r}; choose one of {sorted([*ESTIMATORS, *ROLE_ESTIMATORS])}"
        ) from None
    return fn(batch, **kwargs)
