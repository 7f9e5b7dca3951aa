"""bench/layouts.py still runs and prints its table (numbers are not asserted beyond their shape)."""

from __future__ import annotations

from collections.abc import Callable


def test_layouts_bench_prints_a_row_per_turn_count(run_bench: Callable[..., str]) -> None:
    printed = run_bench("layouts", "--turns", "1", "3", "--episodes", "1", "--reasoning-words", "5")
    rows = [line for line in printed.splitlines() if line.strip()[:1].isdigit()]
    assert [row.split("|")[0].strip() for row in rows] == ["1", "3"]
    ratios = [float(row.split("|")[3].strip().rstrip("x")) for row in rows]
    assert ratios[0] == 1.0 and ratios[1] > 1.0
