import itertools
import math
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_sql.compare import ABS_TOL, REL_TOL, gold_is_ordered, results_match

values = st.one_of(st.none(), st.integers(-5, 5), st.sampled_from(["a", "b", "A"]), st.sampled_from([0.5, 1.25]))


def tables(width: int | None = None) -> st.SearchStrategy[list[tuple[object, ...]]]:
    widths = st.just(width) if width is not None else st.integers(1, 4)
    return widths.flatmap(lambda w: st.lists(st.tuples(*[values] * w), min_size=1, max_size=8))


@settings(max_examples=100, deadline=None)
@given(rows=tables(), seed=st.integers(0, 2**16))
def test_spider_ignores_row_order_without_order_by_and_column_order_always(rows: list, seed: int) -> None:
    rng = random.Random(seed)
    width = len(rows[0])
    perm = list(range(width))
    rng.shuffle(perm)
    shuffled = [tuple(row[j] for j in perm) for row in rows]
    rng.shuffle(shuffled)
    assert results_match(shuffled, rows, ordered=False)
    permuted_only = [tuple(row[j] for j in perm) for row in rows]
    assert results_match(permuted_only, rows, ordered=True)


@settings(max_examples=100, deadline=None)
@given(rows=tables(), extra=tables())
def test_spider_counts_duplicates_and_bird_does_not(rows: list, extra: list) -> None:
    assert not results_match(rows + rows, rows, ordered=False)
    assert results_match(rows + rows, rows, ordered=False, rule="bird")
    if len(extra[0]) == len(rows[0]) and not set(extra) <= set(rows):
        assert not results_match(rows + extra, rows, ordered=False, rule="bird")
        assert not results_match(rows + extra, rows, ordered=False)


@settings(max_examples=100, deadline=None)
@given(rows=tables(), other=tables())
def test_a_match_is_symmetric_and_reflexive(rows: list, other: list) -> None:
    for rule in ("spider", "bird"):
        for ordered in (False, True):
            assert results_match(rows, rows, ordered=ordered, rule=rule)  # type: ignore[arg-type]
            forward = results_match(rows, other, ordered=ordered, rule=rule)  # type: ignore[arg-type]
            assert forward == results_match(other, rows, ordered=ordered, rule=rule)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("answer", "gold", "ordered", "rule", "same"),
    [
        ([(2,), (1,)], [(1,), (2,)], True, "spider", False),
        ([(2,), (1,)], [(1,), (2,)], False, "spider", True),
        ([(2,), (1,)], [(1,), (2,)], True, "bird", True),
        ([(1, "a")], [("a", 1)], False, "bird", False),
        ([(0.1 + 0.2,)], [(0.3,)], False, "spider", True),
        ([(1,)], [(1.0,)], False, "spider", True),
        ([("1",)], [(1,)], False, "spider", False),
        ([(None,)], [(None,)], False, "spider", True),
        ([("a",)], [("A",)], False, "spider", False),
        ([(1, 2)], [(1,)], False, "spider", False),
        ([], [], False, "spider", True),
        ([], [(1,)], False, "spider", False),
        ([(1e12 + 1e-4,)], [(1e12,)], False, "spider", True),
        ([(1e-7,)], [(4e-7,)], False, "spider", False),
        ([(0.1234565,)], [(0.12345650000000001,)], False, "bird", True),
        ([(2.0000001,)], [(2,)], False, "spider", False),
        ([(2**53 + 1,)], [(2**53,)], False, "spider", False),
        ([(None,)], [(0,)], False, "spider", False),
        ([(None,)], [], False, "bird", False),
    ],
    ids=[
        "order-matters",
        "order-free",
        "bird-ignores-order",
        "bird-column-order",
        "float-rounding",
        "int-float",
        "text-vs-number",
        "null",
        "case",
        "width",
        "both-empty",
        "empty-answer",
        "large-sum-off-by-rounding",
        "small-values-differ",
        "rounding-boundary",
        "float-off-by-1e-7",
        "big-integers-exact",
        "null-is-not-zero",
        "null-row-is-not-empty",
    ],
)
def test_rules(answer: list, gold: list, ordered: bool, rule: str, same: bool) -> None:
    assert results_match(answer, gold, ordered=ordered, rule=rule) is same  # type: ignore[arg-type]


def test_many_identical_columns_stay_cheap() -> None:
    rows = [tuple([1] * 8)] * 50
    assert results_match(rows, rows, ordered=False)
    assert not results_match([tuple([1] * 7 + [2])] * 50, rows, ordered=False)


@pytest.mark.parametrize(
    ("sql", "ordered"),
    [("SELECT a FROM t ORDER BY a", True), ("select a from t order\n by a", True), ("SELECT a FROM t", False)],
    ids=["order-by", "lowercase-newline", "none"],
)
def test_gold_is_ordered(sql: str, ordered: bool) -> None:
    assert gold_is_ordered(sql) is ordered


def _reference_spider(answer: list, gold: list, *, ordered: bool) -> bool:
    """Spider's exec_eval rule, brute force over every column order (exact values only)."""
    if len(answer) != len(gold):
        return False
    if not gold:
        return True
    width = len(gold[0])
    if len(answer[0]) != width:
        return False
    for perm in itertools.permutations(range(width)):
        permuted = [tuple(row[j] for j in perm) for row in answer]
        if (permuted == gold) if ordered else (Counter(permuted) == Counter(gold)):
            return True
    return False


exact_values = st.one_of(st.none(), st.integers(0, 2), st.sampled_from(["a", "b"]))


@settings(max_examples=300, deadline=None)
@given(
    width=st.integers(1, 5),
    data=st.data(),
    ordered=st.booleans(),
)
def test_spider_rule_agrees_with_brute_force_over_column_orders(width: int, data: st.DataObject, ordered: bool) -> None:
    table = st.lists(st.tuples(*[exact_values] * width), max_size=6)
    gold = data.draw(table, label="gold")
    answer = data.draw(st.one_of(table, st.permutations(gold)), label="answer")
    if gold and answer and data.draw(st.booleans(), label="permute columns"):
        perm = data.draw(st.permutations(range(width)), label="perm")
        answer = [tuple(row[j] for j in perm) for row in answer]
    assert results_match(answer, gold, ordered=ordered) is _reference_spider(answer, gold, ordered=ordered)


@settings(max_examples=100, deadline=None)
@given(
    rows=st.integers(1, 6).flatmap(
        lambda n: st.lists(st.tuples(*[st.sampled_from([0, 1, None])] * 12), min_size=n, max_size=n)
    ),
    perm=st.permutations(range(12)),
)
def test_any_column_order_of_a_wide_result_matches(rows: list, perm: list) -> None:
    """Wide results with look-alike columns (the same values in many columns) still find their order."""
    answer = [tuple(row[j] for j in perm) for row in rows]
    assert results_match(answer, rows, ordered=True)
    assert results_match(list(reversed(answer)), rows, ordered=False)


finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.tuples(finite, st.sampled_from(["x", "y"]), finite), min_size=1, max_size=6),
    ulps=st.lists(st.integers(-4, 4), min_size=12, max_size=12),
    rule=st.sampled_from(["spider", "bird"]),
)
def test_floats_off_by_a_few_ulps_match_at_every_magnitude(rows: list, ulps: list, rule: str) -> None:
    """A float computed another way (a sum in another order) is a few ulps off: it still matches."""

    def nudge(value: float, steps: int) -> float:
        for _ in range(abs(steps)):
            value = math.nextafter(value, math.inf if steps > 0 else -math.inf)
        return value

    answer = [(nudge(a, ulps[2 * i % 12]), s, nudge(b, ulps[(2 * i + 1) % 12])) for i, (a, s, b) in enumerate(rows)]
    assert results_match(answer, rows, ordered=True, rule=rule)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(value=finite, factor=st.floats(1e-6, 1.0), sign=st.sampled_from([1, -1]))
def test_floats_apart_by_more_than_a_millionth_do_not_match(value: float, factor: float, sign: int) -> None:
    other = value + sign * factor * max(abs(value), 1e-3)  # near zero ABS_TOL (1e-12) applies
    for rule in ("spider", "bird"):
        assert not results_match([(other,)], [(value,)], ordered=False, rule=rule)  # type: ignore[arg-type]


def _tolerance(gold: float) -> float:
    """The widest distance at which a number still equals ``gold`` (math.isclose with the module's tolerances)."""
    return max(REL_TOL * abs(gold), ABS_TOL)


@pytest.mark.parametrize("rule", ["bird", "spider"])
@pytest.mark.parametrize("start", [5.0, 5.0 - 1500 * 9e-10], ids=["from-gold", "around-gold"])
def test_a_band_of_close_floats_does_not_chain_to_the_gold(rule: str, start: float) -> None:
    """3,000 distinct floats 9e-10 apart: each is close to the next, only a few are close to the gold 5.0."""
    band = [(start + i * 9e-10,) for i in range(3000)]
    assert len(set(band)) == 3000
    assert not results_match(band, [(5.0,)], ordered=False, rule=rule)  # type: ignore[arg-type]
    near = [row for row in band if math.isclose(row[0], 5.0, rel_tol=REL_TOL, abs_tol=ABS_TOL)]
    assert 1 < len(near) < 20
    assert results_match(near, [(5.0,)], ordered=False, rule="bird")  # each of them alone is the gold, pairwise


@pytest.mark.parametrize("rule", ["bird", "spider"])
def test_a_gold_band_is_not_matched_by_one_value(rule: str) -> None:
    """Grouping within the gold does not chain either: a gold band of distinct values is many values."""
    gold = [(5.0 + i * 9e-10,) for i in range(3000)]
    assert not results_match([(5.0,)], gold, ordered=False, rule=rule)  # type: ignore[arg-type]
    assert results_match(gold, gold, ordered=False, rule=rule)  # type: ignore[arg-type]


# Gold values far apart (no two within a thousand tolerances): which gold an answer value is close to is unambiguous.
gold_values = st.lists(
    st.integers(-(10**6), 10**6).map(lambda n: n * 0.37) | st.sampled_from([0.0, 1e-13, 1e12, -3.5e15]),
    min_size=1,
    max_size=4,
    unique=True,
)
# Bands in units of the gold's tolerance: where the first value sits, how far apart they are, how many.
bands = st.tuples(st.floats(-3.0, 3.0), st.floats(0.05, 2.0), st.integers(0, 6))


@settings(max_examples=400, deadline=None)
@given(gold=gold_values, data=st.data(), rule=st.sampled_from(["spider", "bird"]), label=st.sampled_from(["x", "y"]))
def test_any_band_in_any_order_matches_exactly_when_every_value_is_close_to_a_gold_value(
    gold: list[float], data: st.DataObject, rule: str, label: str
) -> None:
    gold = [g for g in gold if all(g == h or abs(g - h) > 1000 * max(_tolerance(g), _tolerance(h)) for h in gold)]
    answer: list[float] = []
    near: list[int] = []  # per gold value, how many answer values are close to it
    for g in gold:
        offset, step, count = data.draw(bands, label=f"band around {g!r}")
        values = {g + (offset + i * step) * _tolerance(g) for i in range(count)}  # distinct: rows are values
        answer += values
        near.append(sum(math.isclose(v, g, rel_tol=REL_TOL, abs_tol=ABS_TOL) for v in values))
    answer = data.draw(st.permutations(answer), label="row order")
    every_value_close = sum(near) == len(answer)
    met = all(near) if rule == "bird" else all(n == 1 for n in near)  # spider: a multiset, one value per gold row
    expected = every_value_close and met
    swap = rule == "spider" and data.draw(st.booleans(), label="answer columns swapped")
    answer_rows = [(v, label) if swap else (label, v) for v in answer]
    gold_rows = [(label, g) for g in gold]
    assert results_match(answer_rows, gold_rows, ordered=False, rule=rule) is expected  # type: ignore[arg-type]
