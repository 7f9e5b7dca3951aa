"""Per-turn ReBN inside OpenRLHF's experience maker.

OpenRLHF's estimators (``--algo.advantage.estimator``) are a closed list computed in
``RemoteExperienceMaker.compute_advantages_and_returns`` from one scalar reward per
sample. ReBN (the GEM paper's REINFORCE with Return Batch Normalization) needs the
reward of every turn: ``G_t = r_t + gamma * G_{t+1}`` per turn (``gamma`` =
``--algo.advantage.gamma``, applied per turn, not per token), normalised over every
turn of the whole rollout batch, ``A_t = (G_t - mean) / (std + 1e-9)``, and put on
each generated token of turn ``t``. The numbers are :func:`gem_core.rl.advantages.rebn_advantages`'.

:func:`compute_advantages_and_returns` replaces the method when gem's ReBN is on
(:mod:`gem_openrlhf.patch` installs it); it reads the turns from each sample's label
(:class:`~gem_openrlhf.executor.EpisodeLabel`). Token position ``p`` of a sequence is
``action_mask[p - 1]`` (OpenRLHF shifts the mask by one: log-prob ``i`` scores token ``i + 1``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from gem_core.episode import env_error_report
from gem_core.errors import ConfigError, TrajectoryError
from gem_core.rl.advantages import rebn_advantages
from gem_core.rl.returns import check_gamma, discounted_returns
from gem_openrlhf.executor import EpisodeLabel

__all__ = ["compute_advantages_and_returns", "rebn_token_advantages"]

_logger = logging.getLogger(__name__)


def _turn_spans(label: EpisodeLabel, width: int) -> list[tuple[int, int]]:
    """Each turn's ``[lo, hi)`` in ``action_mask`` coordinates, clipped to the (possibly truncated) width."""
    spans = []
    previous_end = 1
    for index, (start, end) in enumerate(label.turn_ranges):
        if not previous_end <= start < end:
            raise TrajectoryError(
                f"{label.start_state_id}: turn {index} range [{start}, {end}) is empty, unordered or overlaps"
            )
        previous_end = end
        spans.append((min(start - 1, width), min(end - 1, width)))
    return spans


def rebn_token_advantages(
    labels: Sequence[EpisodeLabel], widths: Sequence[int], gamma: float
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per-token ReBN advantages and per-turn returns for a batch of episodes.

    Args:
        labels: One :class:`EpisodeLabel` per sample, all samples of the batch.
        widths: Each sample's ``action_mask`` width.
        gamma: Per-turn discount.

    Returns:
        ``(advantages, returns)``: one float64 row per sample, ``widths[i]`` long, with
        turn ``t``'s ReBN advantage (and its return ``G_t``) on its generated tokens, 0 elsewhere.
    """
    per_turn = rebn_advantages([np.asarray(lb.turn_rewards, dtype=np.float64) for lb in labels], gamma)
    advantages, returns = [], []
    for label, width, turn_advantages in zip(labels, widths, per_turn, strict=True):
        turn_returns = discounted_returns(np.asarray(label.turn_rewards, dtype=np.float64), gamma)
        if len(label.turn_ranges) != len(label.turn_rewards):
            raise TrajectoryError(
                f"{label.start_state_id}: {len(label.turn_ranges)} turn ranges for {len(label.turn_rewards)} rewards"
            )
        adv_row, ret_row = np.zeros(width), np.zeros(width)
        for (lo, hi), advantage, value in zip(_turn_spans(label, width), turn_advantages, turn_returns, strict=True):
            adv_row[lo:hi] = advantage
            ret_row[lo:hi] = value
        advantages.append(adv_row)
        returns.append(ret_row)
    return advantages, returns


@torch.no_grad()
def compute_advantages_and_returns(self: Any, experiences: list[Any]) -> list[Any]:
    """ReBN for ``RemoteExperienceMaker.compute_advantages_and_returns`` (same signature, same result fields).

    Sets each experience's ``advantages`` and ``returns`` (``[B, A]``, like
    ``action_mask``), ``info["return"]`` (the undiscounted episode return per sample)
    and clears ``kl`` as OpenRLHF does. Normalisation runs over every turn of every
    sample in ``experiences`` (the whole rollout batch). A sample whose episode an env
    error ended has no turn (no action token): it is in no statistic, its advantage is 0,
    its per-sample ``info`` means (``kl``, ``logprobs_diff``: 0/0 over an empty mask) are
    set to 0, and the batch logs one warning naming the failed episodes.

    Raises:
        ConfigError: KL is folded into the reward (ReBN has no per-token reward to fold it
            into: use ``--algo.kl.use_loss`` or ``--algo.kl.init_coef 0``).
        TrajectoryError: A sample's label is not a gem episode label, or its turns do not
            match its action mask.
    """
    args = self.strategy.args
    gamma = check_gamma(float(args.algo.advantage.gamma))
    kl_coef = float(getattr(getattr(self, "kl_ctl", None), "value", 0.0) or 0.0)
    if kl_coef and not args.algo.kl.use_loss:
        raise ConfigError(
            "per-turn ReBN cannot fold a KL penalty into the reward (--algo.kl.init_coef > 0 without "
            "--algo.kl.use_loss); pass --algo.kl.use_loss (KL as a loss term) or --algo.kl.init_coef 0"
        )
    labels: list[EpisodeLabel] = []
    widths: list[int] = []
    for experience in experiences:
        mask = experience.action_mask
        if len(experience.labels) != mask.shape[0]:
            raise TrajectoryError(f"{len(experience.labels)} labels for {mask.shape[0]} samples in one experience")
        for row, raw in enumerate(experience.labels):
            label = EpisodeLabel.parse(raw)
            marked = set(torch.nonzero(mask[row]).flatten().tolist())
            spans = _turn_spans(label, mask.shape[1])
            covered = {p for lo, hi in spans for p in range(lo, hi)}
            if covered != marked:
                raise TrajectoryError(
                    f"{label.start_state_id}: the turn ranges of its label do not match its action mask "
                    f"({len(covered)} vs {len(marked)} tokens)"
                )
            labels.append(label)
            widths.append(mask.shape[1])
    advantages, returns = rebn_token_advantages(labels, widths, gamma)
    failed = [lb.env_error is not None for lb in labels]
    report = env_error_report(
        [
            {
                "env_id": lb.env_id,
                "seed": lb.seed,
                "end_reason": lb.end_reason,
                "error": lb.env_error,
                "error_phase": lb.error_phase,
            }
            for lb in labels
        ]
    )
    if report is not None:
        _logger.warning("gem_openrlhf: %s", report)
    index = 0
    for experience in experiences:
        rows = experience.action_mask.shape[0]
        dtype = torch.promote_types(experience.rewards.dtype, torch.float32) if experience.rewards is not None else None
        dtype = dtype or torch.float32
        device = experience.action_mask.device
        experience.advantages = torch.tensor(np.stack(advantages[index : index + rows]), dtype=dtype, device=device)
        experience.returns = torch.tensor(np.stack(returns[index : index + rows]), dtype=dtype, device=device)
        experience.info["return"] = torch.tensor(
            [sum(lb.turn_rewards) for lb in labels[index : index + rows]], dtype=dtype, device=device
        )
        if experience.rewards is not None:
            experience.rewards = experience.rewards.to(dtype)
        rows_failed = torch.tensor(failed[index : index + rows], device=device)
        for key in ("kl", "logprobs_diff"):
            value = experience.info.get(key)
            if isinstance(value, torch.Tensor) and value.shape == rows_failed.shape:
                experience.info[key] = torch.where(rows_failed, torch.zeros_like(value), value)
        experience.kl = None
        index += rows
    return experiences
