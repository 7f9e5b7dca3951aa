"""Why gem's learner does not use oat's ``--whiten_adv``: oat's own formula against the core's ReBN."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
import torch
from gem_oat.rebn import episode_rebn
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.rl.advantages import rebn
from gem_core.rl.returns import discounted_returns

# The whitening lines of oat 0.2.4's PPOMultiTurnLearner.learning_step (one rank: all_reduce is the identity).
OAT_STD_LINE = "std_adv = torch.sqrt(global_square_sum / global_num - mean_adv**2)"


def oat_whiten_adv(returns: list[float]) -> torch.Tensor:
    """Oat's ``whiten_adv`` on one rank, line for line, in the float32 oat computes it in."""
    advantages = torch.tensor(returns).reshape(-1, 1)
    global_sum = advantages.sum()
    global_square_sum = (advantages**2).sum()
    global_num = torch.tensor([advantages.numel()], dtype=torch.float32)
    mean_adv = global_sum / global_num
    std_adv = torch.sqrt(global_square_sum / global_num - mean_adv**2)
    return (advantages - mean_adv) / (std_adv + 1e-9)


def test_the_formula_is_oats() -> None:
    from oat.algorithms.ppo_multiturn import PPOMultiTurnLearner

    assert OAT_STD_LINE in inspect.getsource(PPOMultiTurnLearner.learning_step)


# (return shared by every transition, batch size, what oat's whitening gives instead of 0)
EQUAL_BATCHES = [
    (0.1, 8, "nan"),
    (-0.1, 8, "nan"),
    (0.6561, 8, "nan"),
    (-0.19, 65, 14.9),
    (0.6561, 25, -59.6),
    (0.1, 74, -7.45),
]


@pytest.mark.parametrize(("value", "n", "oat_gives"), EQUAL_BATCHES, ids=lambda v: str(v))
def test_oat_whitening_fails_on_equal_returns_and_rebn_gives_exact_zeros(
    value: float, n: int, oat_gives: object
) -> None:
    oat = oat_whiten_adv([value] * n)
    if oat_gives == "nan":
        assert torch.isnan(oat).all()
    else:
        assert torch.allclose(oat, torch.full_like(oat, float(oat_gives)), atol=0.01)
    ours = rebn(np.full(n, value))
    assert ours.dtype == np.float64 and (ours == 0.0).all()
    _, advantages = episode_rebn([[value]] * n, gamma=1.0)
    assert all((a == 0.0).all() for a in advantages)


rewards_st = st.lists(
    st.lists(st.floats(-10, 10, allow_nan=False, allow_subnormal=False), min_size=1, max_size=6),
    min_size=1,
    max_size=12,
)


@settings(deadline=None)  # no timing assert: 2 shared cores
@given(rewards=rewards_st, gamma=st.sampled_from([0.0, 0.5, 0.9, 1.0]))
def test_episode_rebn_is_rebn_of_the_per_turn_returns(rewards: list[list[float]], gamma: float) -> None:
    returns, advantages = episode_rebn(rewards, gamma)
    assert [len(a) for a in advantages] == [len(r) for r in rewards]
    expected_returns = [discounted_returns(r, gamma) for r in rewards]
    for got, want in zip(returns, expected_returns, strict=True):
        np.testing.assert_array_equal(got, want)
    flat = np.concatenate(advantages)
    assert np.isfinite(flat).all()
    np.testing.assert_array_equal(flat, rebn(np.concatenate(expected_returns)))
    spread = np.ptp(np.concatenate(expected_returns))
    if spread == 0.0:
        assert (flat == 0.0).all()
    elif spread > 1e-6:
        assert math.isclose(float(flat.mean()), 0.0, abs_tol=1e-9)
        assert math.isclose(float(flat.std()), 1.0, rel_tol=1e-6)


@settings(deadline=None)  # no timing assert: 2 shared cores
@given(value=st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False), n=st.integers(1, 300))
def test_equal_returns_are_exact_zeros_for_every_value_and_size(value: float, n: int) -> None:
    _, advantages = episode_rebn([[value]] * n, gamma=0.9)
    assert all((a == 0.0).all() for a in advantages)


@settings(deadline=None)  # no timing assert: 2 shared cores
@given(rewards=rewards_st)
def test_all_reduce_path_matches_the_local_one(rewards: list[list[float]]) -> None:
    # Not initialised here: rebn_tensor runs its two-pass moments on this rank only.
    _, local = episode_rebn(rewards, 0.9)
    _, reduced = episode_rebn(rewards, 0.9, distributed=True)
    np.testing.assert_allclose(np.concatenate(reduced), np.concatenate(local), rtol=1e-9, atol=1e-9)
