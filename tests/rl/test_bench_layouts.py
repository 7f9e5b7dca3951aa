"""bench/layouts.py still runs and prints its table (numbers are not asserted beyond their shape)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "layouts.py"


def test_layouts_bench_prints_a_row_per_turn_count() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--turns", "1", "3", "--episodes", "1", "--reasoning-words", "5"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    rows = [line for line in result.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [row.split("|")[0].strip() for row in rows] == ["1", "3"]
    ratios = [float(row.split("|")[3].strip().rstrip("x")) for row in rows]
    assert ratios[0] == 1.0 and ratios[1] > 1.0
