"""bench/engine_memory.py still runs and prints its table (numbers are not asserted beyond their shape)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the bench uses the ChatML test tokenizer")

BENCH = Path(__file__).resolve().parents[1] / "bench" / "engine_memory.py"


def test_engine_memory_bench_prints_a_row_per_turn_count() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--turns", "2", "6", "--tokens", "16", "--repeats", "1"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    table = [line.split() for line in result.stdout.splitlines()]
    rows = [cells for cells in table if len(cells) == 13 and cells[4].endswith("x")]
    assert [row[0] for row in rows] == ["2", "6"]
    assert all(float(row[4].rstrip("x")) > 0 for row in rows)  # held copy / held view
