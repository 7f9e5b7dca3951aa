import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_sql.compare import gold_is_ordered, results_match

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
