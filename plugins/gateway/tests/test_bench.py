"""bench/gateway.py runs end to end on a few sessions (its figures are not asserted: no timing in tests)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench" / "gateway.py"


def test_the_bench_reports_both_modes_per_concurrency() -> None:
    spec = importlib.util.spec_from_file_location("bench_gateway", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    results = bench.run([3, 5], turns=2, repeats=1, reply_tokens=8, engine_ms=0.0)
    assert [row["sessions"] for row in results["rows"]] == [3, 5]
    for row in results["rows"]:
        for mode in ("direct", "gateway"):
            assert set(row[mode]) == {"median_ms", "p90_ms", "calls_per_s"}
            assert row[mode]["calls_per_s"] > 0
        assert row["throughput_ratio"] > 0
