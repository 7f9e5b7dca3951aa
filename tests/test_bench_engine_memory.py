"""bench/engine_memory.py still runs and prints its table (numbers are not asserted beyond their shape)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

pytest.importorskip("transformers", reason="the bench uses the ChatML test tokenizer")


def test_engine_memory_bench_prints_a_row_per_turn_count(run_bench: Callable[..., str]) -> None:
    printed = run_bench("engine_memory", "--turns", "2", "6", "--tokens", "16", "--repeats", "1")
    rows = [cells for cells in map(str.split, printed.splitlines()) if len(cells) == 13 and cells[4].endswith("x")]
    assert [row[0] for row in rows] == ["2", "6"]
    assert all(float(row[4].rstrip("x")) > 0 for row in rows)  # held copy / held view
