"""ReBN and the other advantage estimators."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gem_core.errors import RLInputError
from gem_core.rl.advantages import (
    ESTIMATORS,
    Moments,
    dr_grpo_advantages,
    estimate_advantages,
    grpo_advantages,
    moments,
    normalize,
    rebn,
    rebn_advantages,
    rebn_from_moments,
    reinforce_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
    stats_from_moments,
)
from gem_core.rl.types import Episode, Turn

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
batches = st.lists(finite, min_size=2, max_size=200)


def _spread(values: list[float]) -> float:
    return float(np.std(np.asarray(values, dtype=np.float64)))


# --------------------------------------------------------------------------- ReBN properties


@settings(deadline=None)  # shared CI cores: timing is not what these test
@given(batches, st.booleans())
def test_rebn_has_mean_zero_and_std_one(returns: list[float], unbiased: bool) -> None:
    assume(_spread(returns) > 1e-3)  # eps=1e-9 then moves the std by < 1e-6
    out = rebn(returns, unbiased=unbiased)
    assert np.isfinite(out).all()
    assert abs(float(out.mean())) < 1e-9
    assert float(out.std(ddof=1 if unbiased else 0)) == pytest.approx(1.0, abs=1e-6)


@settings(deadline=None)  # shared CI cores: timing is not what these test
@given(batches, st.floats(1e-3, 1e3), st.floats(-1e3, 1e3))
def test_rebn_is_invariant_to_shift_and_positive_scale(returns: list[float], scale: float, shift: float) -> None:
    assume(_spread(returns) > 1e-2)
    x = np.asarray(returns)
    np.testing.assert_allclose(rebn(scale * x + shift, eps=0.0), rebn(x, eps=0.0), atol=1e-6)
    # With the default eps, z * std / (std + eps) moves each value by at most |z| * eps / std,
    # for whichever of the two batches has the smaller spread.
    z = np.abs(rebn(x, eps=0.0)).max()
    bound = z * 1e-9 / min(np.std(x), np.std(scale * x)) + 1e-6
    np.testing.assert_allclose(rebn(scale * x + shift), rebn(x), atol=bound)


def _sharded(x: np.ndarray, shards: int, unbiased: bool, shift: float) -> np.ndarray:
    parts = np.array_split(x, shards)
    total = sum((moments(p, shift=shift) for p in parts), Moments(0.0, 0.0, 0))
    assert total.count == x.size
    return np.concatenate(
        [rebn_from_moments(p, total.total, total.total_sq, total.count, unbiased=unbiased, shift=shift) for p in parts]
    )


@settings(deadline=None)  # shared CI cores: timing is not what these test
@given(st.lists(finite, min_size=1, max_size=60), st.integers(1, 5), st.booleans())
def test_rebn_from_moments_over_shards_equals_rebn(returns: list[float], shards: int, unbiased: bool) -> None:
    x = np.asarray(returns)
    spread, size = _spread(returns), float(np.abs(x).max())
    assume(spread == 0.0 or spread > 1e-6 * size)
    # Shifted by the global mean (what a two-round all-reduce gives), the moments form is exact.
    np.testing.assert_allclose(_sharded(x, shards, unbiased, float(x.mean())), rebn(x, unbiased=unbiased), atol=1e-6)
    # Unshifted, it is exact while the spread is not tiny next to the magnitude.
    if spread == 0.0 or spread > 1e-4 * float(np.sqrt(np.mean(x * x))):
        np.testing.assert_allclose(_sharded(x, shards, unbiased, 0.0), rebn(x, unbiased=unbiased), atol=1e-6)


def test_small_spread_at_large_magnitude() -> None:
    # Found by hypothesis: a spread of 1 at a million is a real spread, and rebn resolves it.
    x = np.array([-999501.0, -999500.0])
    np.testing.assert_allclose(rebn(x), [-1.0, 1.0], atol=1e-8)
    # The moments form needs a shift near the mean for it (without, E[x^2] - mean^2 cancels).
    shifted = moments(x, shift=-999500.5)
    np.testing.assert_allclose(
        rebn_from_moments(x, shifted.total, shifted.total_sq, shifted.count, shift=-999500.5), [-1.0, 1.0], atol=1e-8
    )
    plain = moments(x)
    assert not rebn_from_moments(x, plain.total, plain.total_sq, plain.count).any()


EQUAL_VALUES = [-0.1, 0.1, 0.6561, 0.0, 1e-8, 3.0, -1e5]
SIZES = [1, 2, 6, 7, 25, 1000, 4097]


def test_the_float32_hazard_is_real_for_these_values() -> None:
    # The naive float32 formula oat uses gives NaN on these inputs; the tests below would catch a regression to it.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        nan_cases = 0
        for value in (-0.1, 0.1, 0.6561):
            for n in SIZES:
                x = np.full(n, value, dtype=np.float32)
                mean = x.sum() / np.float32(n)
                nan_cases += bool(np.isnan(np.sqrt((x * x).sum() / np.float32(n) - mean * mean)))
    assert nan_cases > 0


@pytest.mark.parametrize("unbiased", [False, True], ids=["population", "unbiased"])
@pytest.mark.parametrize("n", SIZES, ids=[f"n{n}" for n in SIZES])
@pytest.mark.parametrize("value", EQUAL_VALUES, ids=[str(v) for v in EQUAL_VALUES])
def test_equal_float32_returns_give_exact_zeros(value: float, n: int, unbiased: bool) -> None:
    x = np.full(n, value, dtype=np.float32)
    out = rebn(x, unbiased=unbiased)
    assert out.dtype == np.float32
    assert np.array_equal(out, np.zeros(n, dtype=np.float32))
    for shift in (0.0, float(x.astype(np.float64).mean())):
        m = moments(x, shift=shift)
        out_moments = rebn_from_moments(x, m.total, m.total_sq, m.count, unbiased=unbiased, shift=shift)
        assert out_moments.dtype == np.float32
        assert np.array_equal(out_moments, np.zeros(n, dtype=np.float32))
    # Sums accumulated in float32 by a trainer, then handed over: still no NaN.
    s32, ss32 = np.float32(x.sum()), np.float32((x * x).sum())
    assert np.isfinite(rebn_from_moments(x, float(s32), float(ss32), n, unbiased=unbiased)).all()


@settings(deadline=None)  # shared CI cores: timing is not what these test
@given(st.floats(width=32, allow_nan=False, allow_infinity=False), st.integers(1, 300), st.booleans())
def test_any_equal_float32_batch_gives_zeros(value: float, n: int, unbiased: bool) -> None:
    x = np.full(n, value, dtype=np.float32)
    assert not rebn(x, unbiased=unbiased).any()


@settings(deadline=None)  # shared CI cores: timing is not what these test
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=50))
def test_rebn_never_returns_nan_or_inf_even_at_extreme_magnitudes(returns: list[float]) -> None:
    assert np.isfinite(rebn(returns)).all()
    assert np.isfinite(rebn(returns, unbiased=True)).all()


def test_one_element_batch_and_empty_batch() -> None:
    assert rebn([5.0]).tolist() == [0.0]
    assert rebn([5.0], unbiased=True).tolist() == [0.0]
    assert rebn([]).shape == (0,)
    assert stats_from_moments(5.0, 25.0, 1, unbiased=True) == (5.0, 0.0)


def test_population_and_unbiased_std_differ_as_bessel_says() -> None:
    x = [1.0, 3.0]
    np.testing.assert_allclose(rebn(x, eps=0.0), [-1.0, 1.0], rtol=1e-15)
    np.testing.assert_allclose(rebn(x, eps=0.0, unbiased=True), [-1 / np.sqrt(2), 1 / np.sqrt(2)])
    assert stats_from_moments(4.0, 10.0, 2) == (2.0, 1.0)


def test_rebn_keeps_shape_and_float_dtype() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = rebn(x)
    assert out.shape == (2, 3) and out.dtype == np.float32
    assert rebn([1, 2, 3]).dtype == np.float64


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: rebn([1.0, float("nan")]), "NaN or inf"),
        (lambda: rebn([1.0, 2.0], eps=-1.0), "eps"),
        (lambda: stats_from_moments(1.0, 1.0, 0), "count"),
        (lambda: stats_from_moments(float("inf"), 1.0, 2), "finite"),
        (lambda: rebn(["a"]), "numbers"),
    ],
    ids=["nan-return", "negative-eps", "zero-count", "inf-sum", "text"],
)
def test_bad_input_is_rejected(call: object, message: str) -> None:
    with pytest.raises(RLInputError, match=message):
        call()  # type: ignore[operator]


# --------------------------------------------------------------------------- estimators, hand-computed


def test_reinforce_is_the_plain_return() -> None:
    out = reinforce_advantages([[1.0, 0.0, 2.0], [1.0]], gamma=0.5)
    assert [a.tolist() for a in out] == [[1.5, 1.0, 2.0], [1.0]]


def test_rebn_advantages_normalise_over_all_turns_of_all_episodes() -> None:
    # returns: episode A [1, 1] (gamma 1: [0+1, 1]), episode B [3]  -> mean 5/3, population std sqrt(8/9)
    out = rebn_advantages([[0.0, 1.0], [3.0]], gamma=1.0, eps=0.0)
    std = np.sqrt(8 / 9)
    np.testing.assert_allclose(np.concatenate(out), [(1 - 5 / 3) / std, (1 - 5 / 3) / std, (3 - 5 / 3) / std])
    assert [len(a) for a in out] == [2, 1]
    assert rebn_advantages([]) == []


GROUPED = [[1.0], [0.0], [0.5, 0.5], [1.0]]  # group a, with episode returns 1, 0, 1, 1
GROUP_IDS = ["a", "a", "a", "a"]


def test_grpo_hand_computed() -> None:
    # mean 0.75, unbiased std sqrt((3 * 0.25**2 + 0.75**2) / 3) = 0.5
    out = grpo_advantages(GROUPED, GROUP_IDS, eps=0.0)
    assert [a.tolist() for a in out] == [[0.5], [-1.5], [0.5, 0.5], [0.5]]
    population = grpo_advantages(GROUPED, GROUP_IDS, eps=0.0, unbiased=False)
    np.testing.assert_allclose(population[1], [-0.75 / np.sqrt(0.1875)])


def test_dr_grpo_hand_computed() -> None:
    out = dr_grpo_advantages(GROUPED, GROUP_IDS)
    assert [a.tolist() for a in out] == [[0.25], [-0.75], [0.25, 0.25], [0.25]]


def test_rloo_hand_computed() -> None:
    out = rloo_advantages(GROUPED, GROUP_IDS)
    np.testing.assert_allclose(np.concatenate(out), [1 - 2 / 3, 0 - 1, 1 - 2 / 3, 1 - 2 / 3, 1 - 2 / 3])


def test_groups_come_from_start_state_ids_and_do_not_mix() -> None:
    def episode(state: str, reward: float) -> Episode:
        return Episode([Turn("o", "a", reward)], start_state_id=state)

    batch = [episode("x", 1.0), episode("y", 5.0), episode("x", 0.0), episode("y", 5.0), episode("z", 2.0)]
    out = np.concatenate(dr_grpo_advantages(batch))
    assert out.tolist() == [0.5, 0.0, -0.5, 0.0, 0.0]
    # a group of equal returns, and a group of one, give exact zeros (never NaN) in every estimator
    for fn in (grpo_advantages, rloo_advantages):
        values = np.concatenate(fn(batch))
        assert values[1] == values[3] == values[4] == 0.0
        assert values[0] > 0 > values[2]


def test_group_estimators_use_the_discounted_episode_return() -> None:
    out = dr_grpo_advantages([[0.0, 1.0], [1.0, 0.0]], ["g", "g"], gamma=0.5)
    assert [a.tolist() for a in out] == [[-0.25, -0.25], [0.25, 0.25]]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: grpo_advantages([[1.0], [0.0]]), "pass group_ids"),
        (lambda: grpo_advantages([[1.0], [0.0]], ["a"]), "one per episode"),
        (lambda: rloo_advantages([[1.0], []], ["a", "a"]), "no turns"),
        (lambda: estimate_advantages([[1.0]], "ppo"), "unknown advantage estimator"),
    ],
    ids=["arrays-without-groups", "group-count", "empty-episode", "unknown-estimator"],
)
def test_estimator_input_errors(call: object, message: str) -> None:
    with pytest.raises(RLInputError, match=message):
        call()  # type: ignore[operator]


def test_estimators_by_name_match_the_functions() -> None:
    batch = [Episode([Turn("o", "a", r), Turn("o", "a", 1 - r)], start_state_id=s) for r, s in [(0, "a"), (1, "a")]]
    for name, fn in ESTIMATORS.items():
        kwargs = {"gamma": 0.9}
        by_name = estimate_advantages(batch, name, **kwargs)
        direct = fn(batch, **kwargs)
        assert [a.tolist() for a in by_name] == [a.tolist() for a in direct], name


# --------------------------------------------------------------------------- token-level REINFORCE++


def test_reinforce_pp_hand_computed() -> None:
    # Tokens: gen gen env gen gen; rewards on the last token of each turn; gamma 1.
    # Returns on generated tokens: 3 3 . 2 2 -> whitened (unbiased): mean 2.5, std sqrt(1/3)
    out = reinforce_pp_advantages([[0, 1, 0, 0, 2]], [[1, 1, 0, 1, 1]], eps=0.0)
    z = 0.5 / np.sqrt(1 / 3)
    np.testing.assert_allclose(out[0], [z, z, 0.0, -z, -z])


def test_reinforce_pp_discounts_per_token_not_per_turn() -> None:
    # One turn of 3 tokens then a second turn of 1 token with reward 1: gamma reaches turn 1 three times.
    out = reinforce_pp_advantages([[0, 0, 0, 0, 0, 1]], [[1, 1, 1, 0, 0, 1]], gamma=0.5, eps=0.0, unbiased=False)
    returns = np.array([0.125, 0.25, 0.5, 1.0])
    expected = (returns - returns.mean()) / returns.std()
    np.testing.assert_allclose(out[0][[0, 1, 2, 5]], expected)
    assert out[0][3] == out[0][4] == 0.0


def test_reinforce_pp_with_equal_returns_is_zero_and_checks_inputs() -> None:
    assert not reinforce_pp_advantages([[0, 1.0]], [[1, 1]])[0].any()
    with pytest.raises(RLInputError, match="env token"):
        reinforce_pp_advantages([[1.0, 0.0]], [[0, 1]])
    with pytest.raises(RLInputError, match="shape"):
        reinforce_pp_advantages([[1.0, 0.0]], [[1, 1, 1]])
    with pytest.raises(RLInputError, match="reward rows"):
        reinforce_pp_advantages([[1.0]], [])


def test_normalize_without_scale_only_centres() -> None:
    assert normalize([1.0, 3.0], scale=False).tolist() == [-1.0, 1.0]


# --------------------------------------------------------------------------- zero-mean for any spread


def _ulps_from(value: float, steps: int) -> float:
    out = value
    for _ in range(steps):
        out = float(np.nextafter(out, np.inf))
    return out


@st.composite
def any_spread(draw: st.DrawFn) -> list[float]:
    """Batches whose spread is anything: one ulp, a few ulps, subnormal, huge, or arbitrary."""
    kind = draw(st.sampled_from(["ulps", "subnormal", "arbitrary", "huge"]))
    n = draw(st.integers(2, 9))
    if kind == "ulps":
        base = draw(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300))
        values = [_ulps_from(base, draw(st.integers(0, 3))) for _ in range(n)]
    elif kind == "subnormal":
        values = [draw(st.integers(-40, 40)) * 5e-324 + draw(st.sampled_from([0.0, 1e-310])) for _ in range(n)]
    elif kind == "huge":
        values = draw(st.lists(st.sampled_from([-1.7e308, -1e308, 0.0, 1e308, 1.7e308]), min_size=n, max_size=n))
    else:
        values = draw(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=n, max_size=n))
    assume(min(values) != max(values))  # equal values are the exact-zeros case, tested above
    return values


def assert_zero_mean(advantages: np.ndarray) -> None:
    """Finite, and summing to zero up to one rounding per element (the mean itself is not representable)."""
    a = np.asarray(advantages, dtype=np.float64).reshape(-1)
    if a.size == 0:
        return
    assert np.isfinite(a).all(), a
    ulp = float(np.finfo(np.asarray(advantages).dtype).eps)
    tolerance = 4 * a.size * ulp * float(np.abs(a).max()) + a.size * 5e-324
    assert abs(math.fsum(a.tolist())) <= tolerance, (a.tolist(), math.fsum(a.tolist()))


@settings(deadline=None, max_examples=300)
@given(any_spread(), st.booleans(), st.sampled_from([1e-9, 0.0, 1e-6]))
def test_rebn_is_zero_mean_and_finite_for_any_spread(values: list[float], unbiased: bool, eps: float) -> None:
    advantages = rebn(values, unbiased=unbiased, eps=eps)
    assert_zero_mean(advantages)
    assert float(np.abs(advantages).max()) <= math.sqrt(len(values)) + 1e-9  # a z-score is bounded by sqrt(n)


@settings(deadline=None, max_examples=150)
@given(any_spread())
def test_centring_alone_is_zero_mean_for_any_spread(values: list[float]) -> None:
    assume(max(values) - min(values) < 1e308)  # x - mean itself past the float range is not representable
    assert_zero_mean(normalize(values, scale=False))


def test_two_returns_one_ulp_apart_are_symmetric() -> None:
    for value in (0.1, 3.0, -5.5, 1e300, 1e-300, 2.5e-308):
        low, high = value, float(np.nextafter(value, np.inf))
        a, b = rebn([low, high]).tolist()
        assert a == -b and a <= 0  # was [-1.41, 0] at 1e300 and [-3.3e-07, 0] at 3.0


@settings(deadline=None, max_examples=150)
@given(any_spread(), st.integers(1, 3))
def test_group_estimators_are_zero_mean_per_group_for_any_spread(values: list[float], groups: int) -> None:
    ids = [i % groups for i in range(len(values))]
    batch = [np.array([v]) for v in values]
    for estimator in (grpo_advantages, dr_grpo_advantages, rloo_advantages):
        if estimator is not grpo_advantages:
            assume(max(values) - min(values) < 1e307)  # unscaled: R - mean must itself be a float
        out = np.array([a[0] for a in estimator(batch, ids)])
        for group in range(groups):
            assert_zero_mean(out[[i for i, g in enumerate(ids) if g == group]])


@settings(deadline=None, max_examples=100)
@given(any_spread(), st.booleans())
def test_reinforce_pp_whitening_is_zero_mean_for_any_spread(values: list[float], unbiased: bool) -> None:
    rows = [np.array([v]) for v in values]
    masks = [np.ones(1) for _ in values]
    assume(all(math.isfinite(v) for v in values))
    out = reinforce_pp_advantages(rows, masks, unbiased=unbiased)
    assert_zero_mean(np.concatenate(out))


@settings(deadline=None, max_examples=100)
@given(any_spread(), st.booleans())
def test_rebn_from_moments_around_the_mean_is_zero_mean(values: list[float], unbiased: bool) -> None:
    assume(max(abs(v) for v in values) < 1e150)  # squares of the moments form stay finite
    shift = math.fsum(values) / len(values)
    local = moments(values, shift=shift)
    advantages = rebn_from_moments(values, local.total, local.total_sq, local.count, shift=shift, unbiased=unbiased)
    assert_zero_mean(advantages)
