"""Off-policy corrections against a plain-Python reference, property tests, both layouts, every estimator."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.errors import ConfigError, RLInputError
from gem_core.rl.advantages import ESTIMATORS, estimate_advantages, reinforce_pp_advantages
from gem_core.rl.layouts import episodes_to_sequences, episodes_to_transitions
from gem_core.rl.offpolicy import (
    Correction,
    OffPolicyConfig,
    combine,
    correct,
    correct_samples,
    corrected_advantages,
    correction_metrics,
    policy_lags,
    staleness_correction,
    staleness_corrections,
)
from gem_core.rl.types import Episode, Turn

# --------------------------------------------------------------------------- the reference


def reference(
    current: list[float],
    behaviour: list[float],
    mask: list[int],
    config: OffPolicyConfig,
    spans: list[tuple[int, int]] | None = None,
) -> tuple[list[float], list[bool]]:
    """Written from the definitions (verl's rollout correction, SkyRL's off_policy_correction), token by token."""

    def bounded_exp(x: float) -> float:
        return math.exp(min(20.0, max(-20.0, x)))

    def outside(value: float, low: float | None, high: float | None) -> bool:
        return (low is not None and value < low) or (high is not None and value > high)

    n = len(mask)
    weights = [0.0] * n
    keep = [False] * n
    for start, end in spans if spans is not None else [(0, n)]:
        tokens = [t for t in range(start, end) if mask[t]]
        log_r = {t: current[t] - behaviour[t] for t in tokens}
        r = {t: bounded_exp(log_r[t]) for t in tokens}
        if any(outside(r[t], config.outlier_low, config.outlier_high) for t in tokens):
            continue
        kept = [t for t in tokens if not outside(r[t], config.token_mask_low, config.token_mask_high)]
        total = 0.0
        for t in kept:
            total += log_r[t]
        if config.sequence_mask == "product" and outside(
            bounded_exp(total), config.sequence_mask_low, config.sequence_mask_high
        ):
            continue
        if config.sequence_mask == "geometric" and outside(
            bounded_exp(total / max(len(kept), 1)), config.sequence_mask_low, config.sequence_mask_high
        ):
            continue
        for t in kept:
            keep[t] = True
            if config.tis == "token":
                weights[t] = min(r[t], config.tis_cap)
            elif config.tis == "sequence":
                weights[t] = min(bounded_exp(total), config.tis_cap)
            else:
                weights[t] = 1.0
    return weights, keep


# --------------------------------------------------------------------------- strategies

logprob = st.floats(min_value=-6.0, max_value=0.0, allow_nan=False)
bound = st.none() | st.floats(min_value=0.05, max_value=20.0)


@st.composite
def configs(draw: Any) -> OffPolicyConfig:
    def pair() -> tuple[float | None, float | None]:
        low, high = draw(bound), draw(bound)
        if low is not None and high is not None and low > high:
            low, high = high, low
        return low, high

    token_low, token_high = pair()
    outlier_low, outlier_high = pair()
    metric = draw(st.sampled_from([None, "product", "geometric"]))
    seq_low, seq_high = pair()
    if metric is not None and seq_low is None and seq_high is None:
        seq_high = 2.0
    return OffPolicyConfig(
        tis=draw(st.sampled_from([None, "token", "sequence"])),
        tis_cap=draw(st.floats(min_value=0.1, max_value=10.0)),
        token_mask_low=token_low,
        token_mask_high=token_high,
        outlier_low=outlier_low,
        outlier_high=outlier_high,
        sequence_mask=metric,
        sequence_mask_low=seq_low,
        sequence_mask_high=seq_high,
    )


@st.composite
def rows(draw: Any, max_size: int = 12) -> tuple[list[float], list[float], list[int]]:
    n = draw(st.integers(0, max_size))
    current = draw(st.lists(logprob, min_size=n, max_size=n))
    behaviour = draw(st.lists(logprob, min_size=n, max_size=n))
    mask = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    return current, behaviour, mask


@st.composite
def spans_of(draw: Any, n: int) -> list[tuple[int, int]]:
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=6)))
    return [(a, b) for a, b in zip([0, *cuts], [*cuts, n], strict=True) if draw(st.booleans())]


def assert_matches(result: Correction, weights: list[float], keep: list[bool]) -> None:
    assert result.keep.tolist() == keep
    np.testing.assert_allclose(result.weights, weights, rtol=1e-12, atol=0)


# --------------------------------------------------------------------------- against the reference


@settings(deadline=None, max_examples=200)
@given(row=rows(), config=configs(), data=st.data())
def test_correct_equals_the_reference(row: Any, config: OffPolicyConfig, data: Any) -> None:
    current, behaviour, mask = row
    spans = data.draw(st.none() | spans_of(len(mask)))
    result = correct(current, behaviour, mask, config, segments=spans)
    assert_matches(result, *reference(current, behaviour, mask, config, spans))
    assert result.weights.shape == result.keep.shape == (len(mask),)


@pytest.mark.parametrize(
    ("config", "weights", "keep"),
    [
        # log r = [ln 4, ln 0.5, ln 1.5] on the three loss tokens
        (OffPolicyConfig(tis="token", tis_cap=2.0), [2.0, 0.5, 0.0, 1.5], [True, True, False, True]),
        (OffPolicyConfig(tis="sequence", tis_cap=2.0), [2.0, 2.0, 0.0, 2.0], [True, True, False, True]),
        (OffPolicyConfig(tis="sequence", tis_cap=5.0), [3.0, 3.0, 0.0, 3.0], [True, True, False, True]),
        (OffPolicyConfig(token_mask_high=3.0), [0.0, 1.0, 0.0, 1.0], [False, True, False, True]),
        (OffPolicyConfig(token_mask_low=0.6, tis="token"), [2.0, 0.0, 0.0, 1.5], [True, False, False, True]),
        (OffPolicyConfig(outlier_high=3.0), [0.0] * 4, [False] * 4),
        (OffPolicyConfig(sequence_mask="product", sequence_mask_high=2.9), [0.0] * 4, [False] * 4),
        (OffPolicyConfig(sequence_mask="geometric", sequence_mask_high=1.5), [1.0, 1.0, 0.0, 1.0], None),
    ],
    ids=[
        "token-tis-caps-4-at-2",
        "sequence-tis-product-3-capped-at-2",
        "sequence-tis-product-3-under-cap",
        "token-mask-drops-ratio-4",
        "token-mask-low-then-token-tis",
        "outlier-drops-the-sequence",
        "product-mask-drops-the-sequence",
        "geometric-mean-3-to-the-third-kept",
    ],
)
def test_worked_examples(config: OffPolicyConfig, weights: list[float], keep: list[bool] | None) -> None:
    behaviour = [-3.0, -1.0, -7.0, -2.0]
    current = [-3.0 + math.log(4.0), -1.0 + math.log(0.5), float("nan"), -2.0 + math.log(1.5)]
    result = correct(current, behaviour, [1, 1, 0, 1], config)
    np.testing.assert_allclose(result.weights, weights, rtol=1e-12)
    if keep is not None:
        assert result.keep.tolist() == keep
    assert result.keep.tolist() == [w > 0 for w in weights]


# --------------------------------------------------------------------------- properties


@settings(deadline=None, max_examples=150)
@given(row=rows(), data=st.data())
def test_on_policy_ratio_is_one_and_nothing_changes(row: Any, data: Any) -> None:
    _, behaviour, mask = row
    at_least_one = st.floats(min_value=1.0, max_value=10.0)
    at_most_one = st.floats(min_value=0.05, max_value=1.0)
    config = OffPolicyConfig(
        tis=data.draw(st.sampled_from([None, "token", "sequence"])),
        tis_cap=data.draw(at_least_one),
        token_mask_low=data.draw(at_most_one),
        token_mask_high=data.draw(at_least_one),
        outlier_low=data.draw(at_most_one),
        outlier_high=data.draw(at_least_one),
        sequence_mask=data.draw(st.sampled_from(["product", "geometric"])),
        sequence_mask_low=data.draw(at_most_one),
        sequence_mask_high=data.draw(at_least_one),
    )
    result = correct(behaviour, behaviour, mask, config)
    assert result.ratios.tolist() == [1.0] * len(mask)
    assert result.log_ratios.tolist() == [0.0] * len(mask)
    assert result.keep.tolist() == [bool(m) for m in mask]
    assert result.weights.tolist() == [float(m) for m in mask]


@settings(deadline=None, max_examples=200)
@given(row=rows(), config=configs())
def test_caps_and_masks_are_honoured(row: Any, config: OffPolicyConfig) -> None:
    current, behaviour, mask = row
    result = correct(current, behaviour, mask, config)
    m = np.asarray(mask, dtype=bool)
    assert not (result.keep & ~m).any(), "a token outside the loss mask was kept"
    assert (result.weights[~result.keep] == 0).all()
    assert (result.weights >= 0).all()
    if config.tis is not None:
        assert (result.weights <= config.tis_cap).all()
    else:
        assert set(result.weights[result.keep].tolist()) <= {1.0}
    kept = result.ratios[result.keep]
    if config.token_mask_low is not None:
        assert (kept >= config.token_mask_low).all()
    if config.token_mask_high is not None:
        assert (kept <= config.token_mask_high).all()
    if result.keep.any():  # the one sequence was kept: no outlier among its loss tokens
        on = result.ratios[m]
        assert config.outlier_low is None or (on >= config.outlier_low).all()
        assert config.outlier_high is None or (on <= config.outlier_high).all()
    if config.tis == "token":
        np.testing.assert_allclose(result.weights[result.keep], np.minimum(kept, config.tis_cap), rtol=1e-15)


def test_padding_is_never_read() -> None:
    result = correct([-1.0, float("nan"), float("-inf")], [-1.5, float("inf"), 3.0], [1, 0, 0], OffPolicyConfig())
    assert result.keep.tolist() == [True, False, False]


@pytest.mark.parametrize(
    ("current", "behaviour", "mask", "message"),
    [
        ([-1.0, -1.0], [-1.0], [1, 1], "one entry per token"),
        ([float("nan")], [-1.0], [1], r"current_logprobs\[0\] is nan"),
        ([-1.0], [float("-inf")], [1], r"behaviour_logprobs\[0\] is -inf"),
        ([0.3], [-1.0], [1], "not a log-probability"),
        ([[-1.0]], [[-1.0]], [[1]], "1-D"),
    ],
    ids=["shapes-differ", "nan-current", "inf-behaviour", "a-probability", "two-dimensional"],
)
def test_bad_rows_are_typed_errors(current: Any, behaviour: Any, mask: Any, message: str) -> None:
    with pytest.raises(RLInputError, match=message):
        correct(current, behaviour, mask, OffPolicyConfig(tis="token"))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tis": "turn"},
        {"tis_cap": 0.0},
        {"tis_cap": float("inf")},
        {"token_mask_low": 2.0, "token_mask_high": 1.0},
        {"outlier_high": -1.0},
        {"sequence_mask": "mean", "sequence_mask_high": 2.0},
        {"sequence_mask": "product"},
        {"token_mask_high": True},
    ],
    ids=["unknown-tis", "zero-cap", "inf-cap", "low-above-high", "negative", "unknown-metric", "no-bounds", "bool"],
)
def test_bad_configs_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        OffPolicyConfig(**kwargs)


def test_bad_segments_are_refused() -> None:
    with pytest.raises(RLInputError, match="segments"):
        correct([-1.0, -1.0], [-1.0, -1.0], [1, 1], OffPolicyConfig(), segments=[(1, 2), (0, 1)])


# --------------------------------------------------------------------------- both layouts


@st.composite
def episodes(draw: Any, with_logprobs: bool = True) -> Episode:
    """An engine-like episode: each turn's prompt is the previous one plus its generated ids plus env ids."""
    turns: list[Turn] = []
    context = draw(st.lists(st.integers(1, 50), min_size=1, max_size=4))
    version = draw(st.integers(0, 5))
    for index in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, 5))
        generated = draw(st.lists(st.integers(1, 50), min_size=n, max_size=n))
        versions = []
        for _ in range(n):  # a partial rollout: the version may advance mid-turn
            version += draw(st.integers(0, 1))
            versions.append(version)
        turns.append(
            Turn(
                observation=f"o{index}",
                action=f"a{index}",
                reward=draw(st.sampled_from([0.0, -0.1, 1.0])),
                prompt_token_ids=list(context),
                action_token_ids=generated,
                action_logprobs=draw(st.lists(logprob, min_size=n, max_size=n)) if with_logprobs else None,
                policy_versions=versions,
            )
        )
        context = context + generated + draw(st.lists(st.integers(1, 50), min_size=0, max_size=3))
    turns[-1].terminated = True
    return Episode(turns=turns, start_state_id=f"s{draw(st.integers(0, 1))}", episode_id=f"e{draw(st.integers())}")


def current_rows_for(sequences: Any, data: Any) -> list[np.ndarray]:
    out = []
    for seq in sequences:
        values = data.draw(st.lists(logprob, min_size=seq.num_tokens, max_size=seq.num_tokens))
        out.append(np.asarray(values))
    return out


@settings(deadline=None, max_examples=50)
@given(batch=st.lists(episodes(), min_size=1, max_size=4), config=configs(), data=st.data())
def test_both_layouts_agree_turn_by_turn(batch: list[Episode], config: OffPolicyConfig, data: Any) -> None:
    advantages = estimate_advantages(batch, "rebn", gamma=0.9)
    sequences = episodes_to_sequences(batch, advantages=advantages)
    transitions = episodes_to_transitions(batch, advantages)
    currents = current_rows_for(sequences, data)
    per_episode = correct_samples(sequences, currents, config, unit="turn")
    turn_rows = [cur[a:b] for seq, cur in zip(sequences, currents, strict=True) for a, b in seq.turn_spans]
    per_turn = correct_samples(transitions, turn_rows, config)
    spans = [(seq, corr, span) for seq, corr in zip(sequences, per_episode, strict=True) for span in seq.turn_spans]
    assert len(spans) == len(per_turn) == len(transitions)
    for (seq, corr, (a, b)), sample, turn_corr in zip(spans, transitions, per_turn, strict=True):
        assert corr.keep.shape == (seq.num_tokens,) and turn_corr.keep.shape == (len(sample.response_ids),)
        assert corr.keep[a:b].tolist() == turn_corr.keep.tolist()
        np.testing.assert_allclose(corr.weights[a:b], turn_corr.weights, rtol=1e-12)
        np.testing.assert_allclose(
            corrected_advantages(seq, corr)[a:b], corrected_advantages(sample, turn_corr), rtol=1e-12, atol=1e-300
        )
    for seq, corr in zip(sequences, per_episode, strict=True):  # env and prompt tokens: never kept, weight 0
        assert not corr.keep[seq.loss_mask == 0].any()


@settings(deadline=None, max_examples=40)
@given(batch=st.lists(episodes(), min_size=1, max_size=3), config=configs(), data=st.data())
def test_sample_unit_treats_an_episode_as_one_sequence(
    batch: list[Episode], config: OffPolicyConfig, data: Any
) -> None:
    sequences = episodes_to_sequences(batch)
    currents = current_rows_for(sequences, data)
    for seq, cur, corr in zip(sequences, currents, correct_samples(sequences, currents, config), strict=True):
        assert seq.token_logprobs is not None
        weights, keep = reference(cur.tolist(), seq.token_logprobs.tolist(), seq.loss_mask.tolist(), config)
        assert_matches(corr, weights, keep)


ESTIMATOR_IDS = [*sorted(ESTIMATORS), "reinforce_pp"]


@pytest.mark.parametrize("estimator", ESTIMATOR_IDS, ids=ESTIMATOR_IDS)
@settings(deadline=None, max_examples=20)
@given(batch=st.lists(episodes(), min_size=1, max_size=4), config=configs(), data=st.data())
def test_composes_with_every_estimator(
    estimator: str, batch: list[Episode], config: OffPolicyConfig, data: Any
) -> None:
    """Corrected advantages are the estimator's per-token advantages times the weights; on-policy, unchanged."""
    plain = episodes_to_sequences(batch)
    if estimator == "reinforce_pp":
        token_adv = reinforce_pp_advantages([s.token_rewards for s in plain], [s.loss_mask for s in plain], gamma=0.99)
    else:
        per_turn = estimate_advantages(batch, estimator)
        token_adv = [s.token_advantages for s in episodes_to_sequences(batch, advantages=per_turn)]
    for seq, adv in zip(plain, token_adv, strict=True):
        seq.token_advantages = np.asarray(adv)
    currents = current_rows_for(plain, data)
    for seq, corr in zip(plain, correct_samples(plain, currents, config), strict=True):
        assert seq.token_advantages is not None and seq.token_logprobs is not None
        np.testing.assert_array_equal(corrected_advantages(seq, corr), seq.token_advantages * corr.weights)
        on_policy = correct(seq.token_logprobs, seq.token_logprobs, seq.loss_mask, OffPolicyConfig())
        np.testing.assert_array_equal(corrected_advantages(seq, on_policy), seq.token_advantages)
        assert on_policy.keep.tolist() == seq.loss_mask.astype(bool).tolist()


def test_missing_behaviour_logprobs_are_named() -> None:
    batch = [Episode(turns=[Turn("o", "a", 1.0, prompt_token_ids=[1], action_token_ids=[2])], start_state_id="s")]
    sequence = episodes_to_sequences(batch)[0]
    with pytest.raises(RLInputError, match="no token_logprobs"):
        correct_samples([sequence], [np.zeros(2)], OffPolicyConfig())
    logged = Turn("o", "a", 1.0, prompt_token_ids=[1], action_token_ids=[2], action_logprobs=[-0.5])
    with pytest.raises(RLInputError, match=r"current_logprobs\[0\] has 3 entries for 2 input_ids"):
        correct_samples(episodes_to_sequences([Episode([logged], "s")]), [np.zeros(3)], OffPolicyConfig())
    transition = episodes_to_transitions(batch, [[1.0]])[0]
    with pytest.raises(RLInputError, match="no response_logprobs"):
        correct_samples([transition], [np.zeros(1)], OffPolicyConfig())


# --------------------------------------------------------------------------- staleness


@settings(deadline=None, max_examples=50)
@given(
    batch=st.lists(episodes(), min_size=1, max_size=3),
    extra=st.integers(0, 4),
    max_lag=st.none() | st.integers(0, 6),
    level=st.sampled_from(["token", "sample"]),
    decay=st.sampled_from([1.0, 0.5, 0.9]),
)
def test_staleness_in_both_layouts(
    batch: list[Episode], extra: int, max_lag: int | None, level: Any, decay: float
) -> None:
    current = max(v for e in batch for t in e.turns for v in t.policy_versions or []) + extra
    sequences = episodes_to_sequences(batch)
    transitions = episodes_to_transitions(batch, [np.zeros(e.num_turns) for e in batch])
    for sample in [*sequences, *transitions]:
        correction = staleness_correction(sample, current, max_lag=max_lag, level=level, decay=decay)
        lags = policy_lags(sample, current)
        mask = sample.loss_mask.astype(bool) if hasattr(sample, "loss_mask") else np.ones(len(lags), dtype=bool)
        too_old = mask & (lags > (max_lag if max_lag is not None else 10**9))
        expected_keep = mask & ~too_old if level == "token" else mask & (not too_old.any())
        assert correction.keep.tolist() == expected_keep.tolist()
        np.testing.assert_allclose(correction.weights, np.where(expected_keep, decay ** lags.astype(float), 0.0))
    for seq in sequences:  # lags read the recorded versions exactly
        assert seq.token_policy_versions is not None
        on = seq.loss_mask == 1
        assert (policy_lags(seq, current)[on] == current - seq.token_policy_versions[on]).all()
        assert (seq.token_policy_versions[~on] == -1).all()
    assert len(staleness_corrections(sequences, current, max_lag=max_lag)) == len(sequences)


def test_staleness_refuses_a_future_version_and_bad_settings() -> None:
    batch = [
        Episode(
            turns=[Turn("o", "a", 1.0, prompt_token_ids=[1], action_token_ids=[2, 3], policy_versions=[4, 5])],
            start_state_id="s",
        )
    ]
    sequence = episodes_to_sequences(batch)[0]
    with pytest.raises(RLInputError, match="newer than current_version=4"):
        policy_lags(sequence, 4)
    with pytest.raises(ConfigError, match="max_lag"):
        staleness_correction(sequence, 5, max_lag=-1)
    with pytest.raises(ConfigError, match="decay"):
        staleness_correction(sequence, 5, decay=0.0)
    plain = Turn("o", "a", 1.0, prompt_token_ids=[1], action_token_ids=[2])
    unversioned = episodes_to_sequences([Episode([plain], "s")])
    with pytest.raises(RLInputError, match="no policy versions"):
        policy_lags(unversioned[0], 1)


def test_combine_multiplies_weights_and_intersects_keeps() -> None:
    a = Correction(np.array([0.1, 0.2, 0.3]), np.array([2.0, 0.5, 1.0]), np.array([True, True, True]))
    b = Correction(np.zeros(3), np.array([0.5, 1.0, 0.0]), np.array([True, True, False]))
    both = combine(a, b)
    assert both.weights.tolist() == [1.0, 0.5, 0.0]
    assert both.keep.tolist() == [True, True, False]
    assert both.log_ratios is a.log_ratios
    with pytest.raises(RLInputError):
        combine()
    with pytest.raises(RLInputError, match="cannot combine"):
        combine(a, Correction(np.zeros(2), np.zeros(2), np.zeros(2, dtype=bool)))


def test_metrics() -> None:
    behaviour = [-3.0, -1.0, -1.0, -1.0]
    current = [-3.0 + math.log(4.0), -1.0, -1.0, -1.0]
    first = correct(current, behaviour, [1, 1, 0, 1], OffPolicyConfig(tis="token", token_mask_high=3.0))
    second = correct(behaviour, behaviour, [1, 1, 1, 1], OffPolicyConfig(outlier_high=0.5))
    metrics = correction_metrics([first, second], [[1, 1, 0, 1], [1, 1, 1, 1]])
    assert metrics["ratio_max"] == pytest.approx(4.0)
    assert metrics["ratio_min"] == 1.0
    assert metrics["dropped_token_fraction"] == pytest.approx(5 / 7)
    assert metrics["dropped_sample_fraction"] == 0.5
    assert metrics["weight_mean"] == 1.0
    assert correction_metrics([], [])["ratio_mean"] == 0.0
