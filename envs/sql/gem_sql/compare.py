"""Execution match: do two queries' results agree? The rules of Spider's and BIRD's execution accuracy.

* ``"spider"`` (Spider's test-suite ``exec_eval``): the results must have the same number of rows
  and columns; columns may come in any order (a permutation of the answer's columns must make the
  results equal); rows compare as a multiset (duplicates count), or as a list when the gold query
  contains ``ORDER BY``.
* ``"bird"`` (BIRD's ``evaluation.py``): the sets of rows must be equal: duplicates and row order
  are ignored, column order matters.

Both compare values exactly as Python does (``1 == 1.0``; ``'1' != 1``; NULL equals NULL). Where
neither says anything, gem adds one rule: floats are rounded to :data:`FLOAT_DIGITS` decimals first,
so ``SUM`` in another order (``0.1 + 0.2`` against ``0.3``) still matches. Strings are compared
case-sensitively, as both do.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, Literal

__all__ = ["FLOAT_DIGITS", "MatchRule", "gold_is_ordered", "results_match"]

#: Decimals floats are rounded to before comparing.
FLOAT_DIGITS = 6
#: ``"spider"`` or ``"bird"``; see the module docstring.
MatchRule = Literal["spider", "bird"]
#: Most columns whose permutations are searched; wider results must match in the gold order.
_MAX_PERMUTED_COLUMNS = 8
#: Most column orders tried (columns with equal values make many; any of them is as good).
_MAX_TRIES = 1000
_ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)

Row = tuple[Any, ...]


def gold_is_ordered(gold_sql: str) -> bool:
    """Spider's rule: row order matters when the gold query has ``ORDER BY`` anywhere."""
    return _ORDER_BY.search(gold_sql) is not None


def _norm(value: Any) -> Any:
    if isinstance(value, float):
        rounded = round(value, FLOAT_DIGITS)
        return int(rounded) if rounded.is_integer() else rounded
    return value


def _normalized(rows: Sequence[Row]) -> list[Row]:
    return [tuple(_norm(v) for v in row) for row in rows]


def _column_bag(rows: Sequence[Row], index: int) -> Counter[Any]:
    return Counter(row[index] for row in rows)


def _permutations(answer: Sequence[Row], gold: Sequence[Row], width: int) -> Iterator[tuple[int, ...]]:
    """Column orders of ``answer`` worth trying: answer column ``p[i]`` holds gold column ``i``'s values."""
    if width > _MAX_PERMUTED_COLUMNS:
        yield tuple(range(width))
        return
    gold_bags = [_column_bag(gold, i) for i in range(width)]
    answer_bags = [_column_bag(answer, i) for i in range(width)]
    candidates = [[j for j in range(width) if answer_bags[j] == gold_bags[i]] for i in range(width)]

    def extend(prefix: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        if len(prefix) == width:
            yield prefix
            return
        for j in candidates[len(prefix)]:
            if j not in prefix:
                yield from extend((*prefix, j))

    yield from itertools.islice(extend(()), _MAX_TRIES)


def results_match(answer: Sequence[Row], gold: Sequence[Row], *, ordered: bool, rule: MatchRule = "spider") -> bool:
    """Whether the answer's rows match the gold rows under ``rule``.

    Args:
        answer: Rows of the model's query.
        gold: Rows of the gold query.
        ordered: Row order matters (only under ``"spider"``; BIRD compares sets).
        rule: ``"spider"`` or ``"bird"``.
    """
    answer_rows, gold_rows = _normalized(answer), _normalized(gold)
    if rule == "bird":
        return set(answer_rows) == set(gold_rows)
    if len(answer_rows) != len(gold_rows):
        return False
    if not gold_rows:
        return True
    width = len(gold_rows[0])
    if any(len(row) != width for row in answer_rows):
        return False
    gold_bag = Counter(gold_rows)
    for perm in _permutations(answer_rows, gold_rows, width):
        permuted = [tuple(row[j] for j in perm) for row in answer_rows]
        if (permuted == gold_rows) if ordered else (Counter(permuted) == gold_bag):
            return True
    return False
