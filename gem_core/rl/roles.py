"""Role-conditioned advantages for multi-agent episodes (one trajectory per seat, docs/multiagent.md).

In self-play one model plays every seat, but the seats do not have the same expected return (the
first mover of TicTacToe wins more often; a zero-sum game's returns cancel across seats). A
baseline shared by all seats mixes these, so each estimator here keeps one per role:

* :func:`role_rebn_advantages`: ReBN with each role's turns normalised among themselves;
* :func:`role_grpo_advantages`: GRPO with groups of one start state *and* one role;
* :class:`RoleBaseline`: SPIRAL's role-conditioned advantage estimation (arXiv 2506.24119): an
  exponential moving average of the return per (game, role), ``b <- alpha * b + (1 - alpha) * R``,
  then ``A = R - b`` with the updated ``b``, episode by episode in batch order.

The role of an episode is its ``metadata["seat"]`` (the multi-agent engine sets it) unless
``roles`` names one per episode.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from gem_core.errors import RLInputError
from gem_core.rl.advantages import _normalize_float64, _split, grpo_advantages
from gem_core.rl.returns import FloatArray, RewardBatch, batch_returns
from gem_core.rl.types import Episode

__all__ = ["RoleBaseline", "check_role_groups", "episode_roles", "role_grpo_advantages", "role_rebn_advantages"]


def episode_roles(batch: RewardBatch, roles: Sequence[Hashable] | None = None) -> list[Hashable]:
    """One role per episode: ``roles`` when given, else each ``Episode``'s ``metadata["seat"]``.

    Raises:
        RLInputError: ``roles`` has the wrong length, or an episode has no seat and ``roles`` is not given.
    """
    if roles is not None:
        if len(roles) != len(batch):
            raise RLInputError(f"got {len(roles)} roles for {len(batch)} episodes; give one per episode")
        return list(roles)
    out: list[Hashable] = []
    for i, item in enumerate(batch):
        seat = item.metadata.get("seat") if isinstance(item, Episode) else None
        if seat is None:
            raise RLInputError(
                f"batch[{i}] names no role: pass roles=[...] (one per episode), or episodes from the multi-agent "
                "engine (their metadata['seat'])"
            )
        out.append(seat)
    return out


def check_role_groups(group_ids: Sequence[Hashable], roles: Sequence[Hashable]) -> None:
    """Refuse a batch whose groups mix roles (a group is compared with itself: one role per group).

    A trainer that groups its rows (GRPO, TRL's ``num_generations`` rows of one prompt) must
    have every row of a group played from the same seat, else a seat's return is compared with
    another seat's (in a zero-sum game, its own opposite).

    Raises:
        RLInputError: The lengths differ, or a group holds several roles (naming the group and its roles).
    """
    if len(group_ids) != len(roles):
        raise RLInputError(f"got {len(roles)} roles for {len(group_ids)} group ids; give one per episode")
    seen: dict[Hashable, list[Hashable]] = {}
    for group, role in zip(group_ids, roles, strict=True):
        found = seen.setdefault(group, [])
        if role not in found:
            found.append(role)
    mixed = {group: found for group, found in seen.items() if len(found) > 1}
    if mixed:
        group, found = next(iter(mixed.items()))
        raise RLInputError(
            f"group {group!r} mixes roles {found}: every episode of a group must be played from one seat "
            f"({len(mixed)} group(s) mixed); group rows by start state and seat"
        )


def role_rebn_advantages(
    batch: RewardBatch,
    roles: Sequence[Hashable] | None = None,
    *,
    gamma: float = 1.0,
    eps: float = 1e-9,
    unbiased: bool = False,
) -> list[FloatArray]:
    """ReBN per role: per-turn returns, normalised over every turn of the batch played in the same role.

    Returns:
        One array per episode, one advantage per turn; a role whose returns are all equal gets zeros.
    """
    returns = batch_returns(batch, gamma)
    if not returns:
        return []
    role_of = episode_roles(batch, roles)
    flat = np.concatenate(returns)
    owner = np.concatenate([np.full(len(r), i) for i, r in enumerate(returns)]).astype(int)
    out = np.zeros_like(flat)
    for role in dict.fromkeys(role_of):
        members = [i for i, r in enumerate(role_of) if r == role]
        mask = np.isin(owner, members)
        out[mask] = _normalize_float64(flat[mask], eps=eps, unbiased=unbiased, scale=True)
    return _split(out, [len(r) for r in returns])


def role_grpo_advantages(
    batch: RewardBatch,
    roles: Sequence[Hashable] | None = None,
    group_ids: Sequence[Hashable] | None = None,
    *,
    gamma: float = 1.0,
    eps: float = 1e-6,
    unbiased: bool = True,
) -> list[FloatArray]:
    """GRPO per role: episodes are compared within (start state, role) groups.

    Args:
        batch: Episodes (or per-turn reward arrays with ``group_ids`` and ``roles``).
        roles: One role per episode (default: ``metadata["seat"]``).
        group_ids: One start state per episode (default: ``Episode.start_state_id``).
        gamma: Discount of the episode return ``G_0``.
        eps: Added to the group std.
        unbiased: Bessel-corrected std (verl's default).
    """
    role_of = episode_roles(batch, roles)
    if group_ids is None:
        group_ids = []
        for i, item in enumerate(batch):
            if not isinstance(item, Episode):
                raise RLInputError(f"batch[{i}] is a reward array, so pass group_ids (one start-state id per episode)")
            group_ids.append(item.start_state_id)
    if len(group_ids) != len(batch):
        raise RLInputError(f"got {len(group_ids)} group_ids for {len(batch)} episodes; give one per episode")
    keyed: list[Hashable] = [(g, r) for g, r in zip(group_ids, role_of, strict=True)]
    return grpo_advantages(batch, keyed, gamma=gamma, eps=eps, unbiased=unbiased)


class RoleBaseline:
    """SPIRAL's role-conditioned baseline: a moving average of the return per (game, role).

    Keep one instance for the whole run (its state is the baselines; :meth:`state_dict` and
    :meth:`load_state_dict` checkpoint it). Each episode, in batch order, first moves its key's
    baseline, ``b <- alpha * b + (1 - alpha) * R``, and then gets ``A = R - b`` on every turn, where
    ``R`` is its discounted return ``G_0``.

    Args:
        alpha: Decay of the moving average, in ``[0, 1)`` (SPIRAL uses 0.95).
        initial: The baseline of a key not seen yet.

    Raises:
        RLInputError: ``alpha`` or ``initial`` out of range.
    """

    def __init__(self, alpha: float = 0.95, initial: float = 0.0) -> None:
        if not (isinstance(alpha, (int, float)) and 0.0 <= alpha < 1.0):
            raise RLInputError(f"alpha must be in [0, 1), got {alpha!r}")
        if not math.isfinite(initial):
            raise RLInputError(f"initial must be finite, got {initial!r}")
        self.alpha = float(alpha)
        self.initial = float(initial)
        self.baselines: dict[tuple[Hashable, Hashable], float] = {}

    def advantages(
        self,
        batch: RewardBatch,
        roles: Sequence[Hashable] | None = None,
        games: Sequence[Hashable] | None = None,
        *,
        gamma: float = 1.0,
    ) -> list[FloatArray]:
        """Advantages of a batch, moving the baselines as it goes.

        Args:
            batch: Episodes or per-turn reward arrays.
            roles: One role per episode (default: ``metadata["seat"]``).
            games: One game per episode (default: ``Episode.env_id``, else one game for all).
            gamma: Discount of ``R = G_0``.
        """
        returns = batch_returns(batch, gamma)
        role_of = episode_roles(batch, roles)
        if games is None:
            games = [item.env_id if isinstance(item, Episode) else None for item in batch]
        if len(games) != len(batch):
            raise RLInputError(f"got {len(games)} games for {len(batch)} episodes; give one per episode")
        out: list[FloatArray] = []
        for ret, role, game in zip(returns, role_of, games, strict=True):
            if ret.size == 0:
                out.append(np.zeros(0))
                continue
            key = (game, role)
            value = float(ret[0])
            baseline = self.alpha * self.baselines.get(key, self.initial) + (1.0 - self.alpha) * value
            self.baselines[key] = baseline
            out.append(np.full(ret.size, value - baseline))
        return out

    def state_dict(self) -> dict[str, Any]:
        """The baselines and settings, JSON-friendly (keys as ``[game, role]`` pairs)."""
        return {
            "alpha": self.alpha,
            "initial": self.initial,
            "baselines": [[game, role, b] for (game, role), b in self.baselines.items()],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.alpha = float(state["alpha"])
        self.initial = float(state["initial"])
        self.baselines = {(game, role): float(b) for game, role, b in state["baselines"]}
