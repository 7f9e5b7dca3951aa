"""bench/throughput.py still runs and prints a row per mode (numbers are not asserted beyond their shape)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

pytest.importorskip("transformers", reason="the bench uses the ChatML test tokenizer")


def test_throughput_bench_prints_a_row_per_mode(run_bench: Callable[..., str]) -> None:
    printed = run_bench("throughput", "--quick", "--modes", "lockstep,continuous,partial")
    rows = {cells[2]: cells for cells in map(str.split, printed.splitlines()) if cells[:2] == ["8", "4"]}
    assert sorted(rows) == ["continuous", "lockstep", "partial"]
    for cells in rows.values():
        assert float(cells[3]) > 0 and float(cells[4]) > 0  # turns/s, tokens/s
        assert cells[6].endswith("x") and float(cells[6].rstrip("x")) > 0  # x the physical limit
    assert rows["lockstep"][7] == "1.00x"
