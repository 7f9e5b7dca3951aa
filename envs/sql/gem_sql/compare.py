"""Execution match: do two queries' results agree? The rules of Spider's and BIRD's execution accuracy.

* ``"spider"`` (Spider's test-suite ``exec_eval``): the results must have the same number of rows
  and columns; columns may come in any order (a permutation of the answer's columns must make the
  results equal); rows compare as a multiset (duplicates count), or as a list when the gold query
  contains ``ORDER BY``. Two empty results match, whatever their columns.
* ``"bird"`` (BIRD's ``evaluation.py``): the sets of rows must be equal: duplicates and row order
  are ignored, column order matters.

Both compare values exactly as Python does (``1 == 1.0``; ``'1' != 1``; NULL equals NULL). Where
neither says anything, gem adds one rule: a float equals a number within a relative :data:`REL_TOL`
(``math.isclose``'s default; :data:`ABS_TOL` near zero), so ``SUM`` in another order (``0.1 + 0.2``
against ``0.3``, or sums of 1e12) still matches, whatever the magnitude. Strings are compared
case-sensitively, as both do.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

__all__ = ["ABS_TOL", "REL_TOL", "MatchRule", "gold_is_ordered", "results_match"]

#: Relative difference under which a float equals another number.
REL_TOL = 1e-9
#: Absolute difference under which a float equals another number (for values near zero).
ABS_TOL = 1e-12
#: ``"spider"`` or ``"bird"``; see the module docstring.
MatchRule = Literal["spider", "bird"]
#: Work budget of the column-order search (row-cells projected); past it the results do not match.
_MAX_SEARCH_CELLS = 20_000_000

Row = tuple[Any, ...]


def gold_is_ordered(gold_sql: str) -> bool:
    """Spider's rule: row order matters when the gold query contains ``order by`` (any case, any spacing)."""
    return "order by" in " ".join(gold_sql.lower().split())


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value))


def _close(a: int | float, b: int | float) -> bool:
    if a == b:
        return True
    if not (isinstance(a, float) or isinstance(b, float)):
        return False  # two integers are equal or not: no tolerance
    try:
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    except OverflowError:  # an integer past the float range
        return False


def _canonical_numbers(*results: Sequence[Row]) -> dict[Any, Any]:
    """Each number of ``results`` mapped to the smallest number it is chained to by :func:`_close`.

    Numbers are sorted and each joins its predecessor's group when the two are close, so a value
    and any copy of it off by rounding land in the same group, in whichever result they are.
    """
    numbers = sorted({v for rows in results for row in rows for v in row if _is_number(v)})
    canonical: dict[Any, Any] = {}
    previous: Any = None
    representative: Any = None
    for value in numbers:
        if previous is None or not _close(previous, value):
            representative = value
        canonical[value] = representative
        previous = value
    return canonical


def _normalized(rows: Sequence[Row], canonical: dict[Any, Any]) -> list[Row]:
    return [tuple(canonical.get(v, v) if _is_number(v) else v for v in row) for row in rows]


def _column_order_exists(answer: list[Row], gold: list[Row], *, ordered: bool) -> bool:
    """Whether some order of ``answer``'s columns makes it equal ``gold`` (as lists or as multisets).

    Depth-first over gold columns; a prefix of answer columns is kept only while the answer projected
    on it equals the gold projected on its first columns (a necessary condition), and of answer
    columns with identical values only the first is tried (they are interchangeable).
    """
    width = len(gold[0])
    answer_columns = [tuple(row[j] for row in answer) for j in range(width)]
    gold_columns = [tuple(row[i] for row in gold) for i in range(width)]
    answer_bags = [Counter(column) for column in answer_columns]
    candidates = [[j for j in range(width) if answer_bags[j] == Counter(column)] for column in gold_columns]
    budget = [_MAX_SEARCH_CELLS]

    def same(left: list[Row], right: list[Row]) -> bool:
        return left == right if ordered else Counter(left) == Counter(right)

    def extend(used: tuple[int, ...], answer_prefix: list[Row], gold_prefix: list[Row]) -> bool:
        level = len(used)
        if level == width:
            return True
        gold_next = [(*g, v) for g, v in zip(gold_prefix, gold_columns[level], strict=True)]
        tried: set[tuple[Any, ...]] = set()
        for j in candidates[level]:
            if j in used or answer_columns[j] in tried:
                continue
            tried.add(answer_columns[j])
            budget[0] -= len(answer) * (level + 1)
            if budget[0] < 0:
                return False
            answer_next = [(*a, v) for a, v in zip(answer_prefix, answer_columns[j], strict=True)]
            if same(answer_next, gold_next) and extend((*used, j), answer_next, gold_next):
                return True
        return False

    empty: list[Row] = [() for _ in gold]
    return extend((), list(empty), empty)


def results_match(answer: Sequence[Row], gold: Sequence[Row], *, ordered: bool, rule: MatchRule = "spider") -> bool:
    """Whether the answer's rows match the gold rows under ``rule``.

    Args:
        answer: Rows of the model's query.
        gold: Rows of the gold query.
        ordered: Row order matters (only under ``"spider"``; BIRD compares sets).
        rule: ``"spider"`` or ``"bird"``.
    """
    canonical = _canonical_numbers(answer, gold)
    answer_rows, gold_rows = _normalized(answer, canonical), _normalized(gold, canonical)
    if rule == "bird":
        return set(answer_rows) == set(gold_rows)
    if len(answer_rows) != len(gold_rows):
        return False
    if not gold_rows:
        return True
    width = len(gold_rows[0])
    if any(len(row) != width for row in (*answer_rows, *gold_rows)):
        return False
    if (answer_rows == gold_rows) if ordered else (Counter(answer_rows) == Counter(gold_rows)):
        return True  # the common case: columns already in the gold's order
    return _column_order_exists(answer_rows, gold_rows, ordered=ordered)
