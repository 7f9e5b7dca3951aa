"""Role-conditioned advantages, held to straightforward loop implementations written here."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.errors import RLInputError
from gem_core.rl.advantages import estimate_advantages, rebn_advantages
from gem_core.rl.roles import RoleBaseline, check_role_groups, role_grpo_advantages, role_rebn_advantages
from gem_core.rl.types import Episode, Turn

rewards_st = st.lists(st.floats(-5, 5, allow_nan=False).map(lambda x: round(x, 3)), min_size=1, max_size=4)
batch_st = st.lists(
    st.tuples(rewards_st, st.sampled_from(["first", "second", "third"]), st.integers(0, 2)), min_size=1, max_size=12
)


def _returns(rewards: list[float], gamma: float) -> list[float]:
    out, running = [], 0.0
    for r in reversed(rewards):
        running = r + gamma * running
        out.append(running)
    return out[::-1]


def _reference_role_rebn(batch: list[tuple[list[float], str, int]], gamma: float) -> list[list[float]]:
    rets = [_returns(r, gamma) for r, _, _ in batch]
    out = [[0.0] * len(r) for r in rets]
    for role in {role for _, role, _ in batch}:
        pooled = [g for (_, r_, _), ret in zip(batch, rets, strict=True) if r_ == role for g in ret]
        mean = statistics.fmean(pooled)
        std = statistics.pstdev(pooled)
        for i, (_, r_, _) in enumerate(batch):
            if r_ == role:
                out[i] = [0.0 if max(pooled) == min(pooled) else (g - mean) / (std + 1e-9) for g in rets[i]]
    return out


def _reference_role_grpo(batch: list[tuple[list[float], str, int]]) -> list[list[float]]:
    scores = [sum(r) for r, _, _ in batch]
    out = []
    for i, (rewards, role, group) in enumerate(batch):
        peers = [scores[j] for j, (_, r_, g_) in enumerate(batch) if r_ == role and g_ == group]
        if len(peers) < 2 or max(peers) == min(peers):
            adv = 0.0
        else:
            adv = (scores[i] - statistics.fmean(peers)) / (statistics.stdev(peers) + 1e-6)
        out.append([adv] * len(rewards))
    return out


def _reference_spiral(batch: list[tuple[list[float], str, int]], alpha: float) -> list[list[float]]:
    baselines: dict[tuple[int, str], float] = {}
    out = []
    for rewards, role, game in batch:
        key = (game, role)
        baselines[key] = alpha * baselines.get(key, 0.0) + (1 - alpha) * sum(rewards)
        out.append([sum(rewards) - baselines[key]] * len(rewards))
    return out


def _close(a: list[np.ndarray], b: list[list[float]]) -> bool:
    return len(a) == len(b) and all(np.allclose(x, y, atol=1e-6) for x, y in zip(a, b, strict=True))


@settings(max_examples=60, deadline=None)
@given(batch=batch_st, gamma=st.sampled_from([1.0, 0.9]))
def test_role_rebn_matches_the_loop_reference(batch: list[tuple[list[float], str, int]], gamma: float) -> None:
    got = role_rebn_advantages([r for r, _, _ in batch], [role for _, role, _ in batch], gamma=gamma)
    assert _close(got, _reference_role_rebn(batch, gamma))
    for role in {role for _, role, _ in batch}:  # each role is centred on its own
        assert abs(sum(float(x.sum()) for x, (_, r_, _) in zip(got, batch, strict=True) if r_ == role)) < 1e-6


@settings(max_examples=60, deadline=None)
@given(batch=batch_st)
def test_role_grpo_matches_the_loop_reference(batch: list[tuple[list[float], str, int]]) -> None:
    got = role_grpo_advantages([r for r, _, _ in batch], [role for _, role, _ in batch], [g for _, _, g in batch])
    assert _close(got, _reference_role_grpo(batch))


@settings(max_examples=60, deadline=None)
@given(batch=batch_st, alpha=st.sampled_from([0.0, 0.5, 0.95]))
def test_spiral_baseline_matches_the_loop_reference(batch: list[tuple[list[float], str, int]], alpha: float) -> None:
    baseline = RoleBaseline(alpha=alpha)
    half = len(batch) // 2  # state carries across calls
    got = baseline.advantages(
        [r for r, _, _ in batch[:half]], [x[1] for x in batch[:half]], [x[2] for x in batch[:half]]
    )
    restored = RoleBaseline()
    restored.load_state_dict(baseline.state_dict())
    got += restored.advantages(
        [r for r, _, _ in batch[half:]], [x[1] for x in batch[half:]], [x[2] for x in batch[half:]]
    )
    assert _close(got, _reference_spiral(batch, alpha))


def test_one_role_is_plain_rebn() -> None:
    batch = [[1.0, 0.0], [0.0], [3.0, -1.0, 2.0]]
    for x, y in zip(role_rebn_advantages(batch, ["p"] * 3), rebn_advantages(batch), strict=True):
        assert np.allclose(x, y)


def _episode(seat: str, rewards: list[float], seed: int) -> Episode:
    turns = [Turn(observation="o", action="a", reward=r) for r in rewards]
    return Episode(turns=turns, start_state_id=f"ma:Nim/seed={seed}", env_id="ma:Nim", metadata={"seat": seat})


def test_roles_come_from_the_seat_metadata_and_zero_sum_seats_are_not_mixed() -> None:
    # The first mover always wins: a shared baseline would call every first-seat move good; per role, none is.
    batch = [_episode("first", [1.0], s) for s in range(3)] + [_episode("second", [-1.0], s) for s in range(3)]
    assert all(np.all(a == 0) for a in estimate_advantages(batch, "role_rebn"))
    assert all(np.all(a == 0) for a in estimate_advantages(batch, "role_grpo"))
    assert not all(np.all(a == 0) for a in estimate_advantages(batch, "rebn"))


@pytest.mark.parametrize(
    "call",
    [
        lambda: role_rebn_advantages([[1.0]]),
        lambda: role_rebn_advantages([[1.0]], ["a", "b"]),
        lambda: role_grpo_advantages([[1.0]], ["a"]),
        lambda: RoleBaseline(alpha=1.0),
        lambda: RoleBaseline().advantages([[1.0]], ["a"], games=[1, 2]),
    ],
    ids=["no-roles", "roles-length", "no-groups", "alpha", "games-length"],
)
def test_bad_input_is_named(call: object) -> None:
    with pytest.raises(RLInputError):
        call()  # type: ignore[operator]


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["first", "second"])), min_size=1, max_size=12))
def test_check_role_groups_refuses_exactly_the_groups_that_mix_seats(rows: list[tuple[int, str]]) -> None:
    groups, roles = [g for g, _ in rows], [r for _, r in rows]
    mixed = any(len({r for g2, r in rows if g2 == g}) > 1 for g in groups)
    if mixed:
        with pytest.raises(RLInputError, match="mixes roles"):
            check_role_groups(groups, roles)
    else:
        check_role_groups(groups, roles)


def test_check_role_groups_needs_one_role_per_row() -> None:
    with pytest.raises(RLInputError, match="one per episode"):
        check_role_groups([0, 0], ["first"])
