"""Per-turn discounted returns."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.errors import RLInputError
from gem_core.rl.returns import batch_returns, discounted_returns, episode_return
from gem_core.rl.types import Episode, Turn

rewards_lists = st.lists(st.floats(-100, 100, allow_nan=False), max_size=40)
gammas = st.floats(0.0, 1.0)


@settings(deadline=None)  # shared CI cores: timing is not what these test
@given(rewards_lists, gammas)
def test_returns_equal_the_discounted_sum_of_future_rewards(rewards: list[float], gamma: float) -> None:
    returns = discounted_returns(rewards, gamma)
    assert returns.dtype == np.float64 and returns.shape == (len(rewards),)
    for t in range(len(rewards)):
        expected = math.fsum(gamma**k * r for k, r in enumerate(rewards[t:]))
        assert returns[t] == pytest.approx(expected, rel=1e-9, abs=1e-9)


@settings(deadline=None)  # shared CI cores: timing is not what these test
@given(rewards_lists, gammas)
def test_returns_satisfy_the_recursion(rewards: list[float], gamma: float) -> None:
    g = discounted_returns(rewards, gamma)
    for t in range(len(rewards) - 1):
        assert g[t] == pytest.approx(rewards[t] + gamma * g[t + 1], rel=1e-12, abs=1e-12)
    if rewards:
        assert g[-1] == rewards[-1]


@pytest.mark.parametrize(
    ("rewards", "gamma", "expected"),
    [
        ([0.0, 0.0, 1.0], 0.9, [0.81, 0.9, 1.0]),
        ([1.0, 1.0, 1.0], 1.0, [3.0, 2.0, 1.0]),
        ([1.0, 2.0, 3.0], 0.0, [1.0, 2.0, 3.0]),
        ([-0.1, -0.1, 1.0], 0.5, [-0.1 - 0.05 + 0.25, -0.1 + 0.5, 1.0]),
        ([], 0.9, []),
    ],
    ids=["sparse-final", "undiscounted", "myopic", "format-penalties", "empty"],
)
def test_hand_computed_returns(rewards: list[float], gamma: float, expected: list[float]) -> None:
    np.testing.assert_allclose(discounted_returns(rewards, gamma), expected, rtol=1e-12, atol=1e-15)


def test_gamma_is_per_turn_whatever_the_token_count() -> None:
    short = Turn("o", "a", 0.0, action_token_ids=[1])
    long = Turn("o", "a" * 50, 0.0, action_token_ids=list(range(50)))
    last = Turn("o", "a", 1.0, terminated=True)
    for first in (short, long):
        episode = Episode([first, last], start_state_id="s")
        assert discounted_returns(episode, 0.5).tolist() == [0.5, 1.0]
        assert episode_return(episode, 0.5) == 0.5


def test_batch_returns_accept_episodes_and_arrays() -> None:
    episode = Episode([Turn("o", "a", 1.0), Turn("o", "a", 1.0)], start_state_id="s")
    out = batch_returns([episode, np.array([2.0]), [0, 0, 3]], gamma=1.0)
    assert [r.tolist() for r in out] == [[2.0, 1.0], [2.0], [3.0, 3.0, 3.0]]
    assert episode_return([], 0.9) == 0.0


@pytest.mark.parametrize(
    "gamma", [-0.1, 1.01, float("nan"), "0.9x", None], ids=["negative", "above-one", "nan", "text", "none"]
)
def test_bad_gamma_is_rejected(gamma: object) -> None:
    with pytest.raises(RLInputError, match="gamma"):
        discounted_returns([1.0], gamma)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rewards", "message"),
    [([1.0, float("nan")], r"rewards\[1\] is nan"), ([[1.0]], "1-D"), (["a"], "numbers")],
    ids=["nan", "2-d", "text"],
)
def test_bad_rewards_are_rejected(rewards: object, message: str) -> None:
    with pytest.raises(RLInputError, match=message):
        discounted_returns(rewards, 1.0)  # type: ignore[arg-type]


def test_docstring_examples_run() -> None:
    import doctest

    from gem_core.rl import advantages, returns

    for module in (returns, advantages):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
