"""Execution match: do two queries' results agree? The rules of Spider's and BIRD's execution accuracy.

* ``"spider"`` (Spider's test-suite ``exec_eval``): the results must have the same number of rows
  and columns; columns may come in any order (a permutation of the answer's columns must make the
  results equal); rows compare as a multiset (duplicates count), or as a list when the gold query
  contains ``ORDER BY``. Two empty results match, whatever their columns.
* ``"bird"`` (BIRD's ``evaluation.py``): the sets of rows must be equal: duplicates and row order
  are ignored, column order matters.

Both compare values exactly as Python does (``1 == 1.0``; ``'1' != 1``; NULL equals NULL). Where
neither says anything, gem adds one rule: an answer's number equals a gold number within a relative
:data:`REL_TOL` (``math.isclose``'s default; :data:`ABS_TOL` near zero) when either is a float, so
``SUM`` in another order (``0.1 + 0.2`` against ``0.3``, or sums of 1e12) still matches, whatever the
magnitude. The tolerance is pairwise against the gold's numbers: answer values never group among
themselves, so a band of distinct floats each a hair from the next is as many distinct values, not
one (see :func:`_float_representatives`). Strings are compared case-sensitively, as both do.
"""

from __future__ import annotations

import bisect
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
#: Column orders the search may try beyond one straight path; past it the results do not match.
_MAX_SEARCH_STEPS = 2_000

Row = tuple[Any, ...]


def _same_counts(a: Counter[Any], b: Counter[Any]) -> bool:
    return dict.__eq__(a, b) is True  # C-level; Counter's own == walks both in Python


def gold_is_ordered(gold_sql: str) -> bool:
    """Spider's rule: row order matters when the gold query contains ``order by`` (any case, any spacing)."""
    return "order by" in " ".join(gold_sql.lower().split())


def _close(a: int | float, b: int | float) -> bool:
    if a == b:
        return True
    if not (isinstance(a, float) or isinstance(b, float)):
        return False  # two integers are equal or not: no tolerance
    try:
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    except OverflowError:  # an integer past the float range
        return False


def _float_representatives(answer: Sequence[Row], gold: Sequence[Row]) -> dict[Any, Any]:
    """Numbers that compare as a gold number, mapped to it (empty when neither result holds a float).

    The tolerance is pairwise against the gold, never through the answer's own values (a band of
    answer floats each close to the next would otherwise chain far from the gold). Gold numbers are
    grouped around the smallest of each group (a member is close to that smallest one, so a group
    spans one tolerance, not a chain), and every number maps to its group's smallest. An answer
    number maps to the group of the nearest gold number it is close to; one close to none stays
    itself, so it matches no gold value.
    """
    answer_cells = [v for row in answer for v in row]
    gold_cells = [v for row in gold for v in row]
    if not any(type(v) is float for v in (*answer_cells, *gold_cells)):
        return {}
    # type() excludes bools; v == v drops NaN (SQLite never returns one, a caller's rows might)
    gold_numbers = sorted({v for v in gold_cells if type(v) in (int, float) and v == v})
    representatives: dict[Any, Any] = {}
    representative: Any = None
    for value in gold_numbers:
        if representative is None or not _close(representative, value):
            representative = value
        elif value != representative:
            representatives[value] = representative
    for value in {v for v in answer_cells if type(v) in (int, float) and v == v}:
        nearest = _nearest_close(value, gold_numbers)
        if nearest is not None:
            target = representatives.get(nearest, nearest)
            if value != target:
                representatives[value] = target
    return representatives


def _nearest_close(value: int | float, numbers: list[Any]) -> Any:
    """The number of the sorted ``numbers`` nearest to ``value`` among those close to it, or ``None``.

    The numbers close to ``value`` form an interval around it, so the neighbours on either side of
    where ``value`` sorts are the only candidates.
    """
    at = bisect.bisect_left(numbers, value)
    close = [numbers[i] for i in (at - 1, at) if 0 <= i < len(numbers) and _close(value, numbers[i])]
    if len(close) < 2:
        return close[0] if close else None
    try:
        below, above = abs(value - close[0]), abs(close[1] - value)
    except OverflowError:  # not reachable for close numbers (both within the float range); kept total
        return close[0]
    return close[0] if below <= above else close[1]


def _normalized(rows: Sequence[Row], representatives: dict[Any, Any]) -> list[Row]:
    if not representatives:
        return [tuple(row) for row in rows]
    get = representatives.get
    return [tuple([get(v, v) for v in row]) for row in rows]


def _column_order_exists(answer: list[Row], gold: list[Row], *, ordered: bool) -> bool:
    """Whether some order of ``answer``'s columns makes it equal ``gold`` (as lists or as multisets).

    Depth-first over gold columns; a prefix of answer columns is kept only while the answer projected
    on it equals the gold projected on its first columns (a necessary condition), and of answer
    columns with identical values only the first is tried (they are interchangeable). A row's prefix
    is one integer (an id per distinct ``(prefix id, value)`` of the gold), so each try costs one pass.
    """
    width, n = len(gold[0]), len(gold)
    answer_columns = [tuple(row[j] for row in answer) for j in range(width)]
    gold_columns = [tuple(row[i] for row in gold) for i in range(width)]
    answer_bags = [Counter(column) for column in answer_columns]
    gold_bags = [Counter(column) for column in gold_columns]
    candidates = [[j for j in range(width) if _same_counts(answer_bags[j], bag)] for bag in gold_bags]
    if any(not options for options in candidates):
        return False
    order = [options[0] for options in candidates]
    if all(len(options) == 1 for options in candidates) and len(set(order)) == width:  # the order is forced
        permuted = [tuple(row[j] for j in order) for row in answer]
        return permuted == gold if ordered else _same_counts(Counter(permuted), Counter(gold))
    ids: dict[tuple[Any, Any], int] = {}
    gold_levels: list[list[int]] = [[-1] * n]  # gold prefix ids per level, built as the search goes deeper
    budget = [_MAX_SEARCH_STEPS + width]  # one straight path always fits

    def gold_at(level: int) -> list[int]:
        while len(gold_levels) <= level:
            previous, column = gold_levels[-1], gold_columns[len(gold_levels) - 1]
            gold_levels.append([ids.setdefault(key, len(ids)) for key in zip(previous, column, strict=True)])
        return gold_levels[level]

    def extend(used: tuple[int, ...], answer_prefix: list[int | None]) -> bool:
        level = len(used)
        if level == width:
            return True
        gold_next = gold_at(level + 1)
        target = gold_next if ordered else Counter(gold_next)
        tried: set[tuple[Any, ...]] = set()
        for j in candidates[level]:
            if j in used or answer_columns[j] in tried:
                continue
            tried.add(answer_columns[j])
            budget[0] -= 1
            if budget[0] < 0:
                return False
            # None: a prefix that no gold row has
            answer_next = [ids.get(key) for key in zip(answer_prefix, answer_columns[j], strict=True)]
            same = answer_next == target if ordered else _same_counts(Counter(answer_next), target)  # type: ignore[arg-type]
            if same and extend((*used, j), answer_next):
                return True
        return False

    return extend((), [-1] * n)


def results_match(answer: Sequence[Row], gold: Sequence[Row], *, ordered: bool, rule: MatchRule = "spider") -> bool:
    """Whether the answer's rows match the gold rows under ``rule``.

    Args:
        answer: Rows of the model's query.
        gold: Rows of the gold query.
        ordered: Row order matters (only under ``"spider"``; BIRD compares sets).
        rule: ``"spider"`` or ``"bird"``.
    """
    representatives = _float_representatives(answer, gold)
    answer_rows, gold_rows = _normalized(answer, representatives), _normalized(gold, representatives)
    if rule == "bird":
        return set(answer_rows) == set(gold_rows)
    if len(answer_rows) != len(gold_rows):
        return False
    if not gold_rows:
        return True
    width = len(gold_rows[0])
    if any(len(row) != width for row in (*answer_rows, *gold_rows)):
        return False
    if (answer_rows == gold_rows) if ordered else _same_counts(Counter(answer_rows), Counter(gold_rows)):
        return True  # the common case: columns already in the gold's order
    return _column_order_exists(answer_rows, gold_rows, ordered=ordered)
