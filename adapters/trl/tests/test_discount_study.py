"""bench/discount_study.py: the observation features, and a tiny study end to end."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "discount_study.py"


@pytest.fixture(scope="module")
def study() -> ModuleType:
    spec = importlib.util.spec_from_file_location("discount_study", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["discount_study"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("observation", "interval"),
    [
        ("Guesses so far: none. ... one whole number from 1 to 50 inside", (1, 50)),
        ("Guesses so far: 25 (secret is lower), 12 (secret is higher). ... from 1 to 50", (13, 24)),
        ("Guesses so far: 10 (secret is lower), 30 (secret is lower). ... from 1 to 50", (1, 9)),
        ("Guesses so far: 3 (secret is higher), 5 (secret is lower). ... from 1 to 10", (4, 4)),
    ],
    ids=["no-hints", "two-hints", "stale-hint", "one-left"],
)
def test_open_interval_follows_the_hints(study: ModuleType, observation: str, interval: tuple[int, int]) -> None:
    assert study.open_interval(observation) == interval


def test_open_interval_names_a_foreign_observation(study: ModuleType) -> None:
    with pytest.raises(ValueError, match="from LOW to HIGH"):
        study.open_interval("Sudoku board")


def test_a_tiny_study_writes_table_json_and_plot(study: ModuleType, tmp_path: Path) -> None:
    argv = ["--gammas", "1.0", "0.5", "--seeds", "1", "--iterations", "2", "--batch", "4", "--high", "10"]
    rows = study.main([*argv, "--max-turns", "10", "--out", str(tmp_path)])
    assert set(rows) == {"1.0", "0.5"}
    assert all(0.0 <= row["success_end"] <= 1.0 and row["turns_end"] >= 1.0 for row in rows.values())
    assert "| 0.5 |" in (tmp_path / "discount_study.md").read_text()
    assert json.loads((tmp_path / "discount_study.json").read_text())["results"] == rows
    assert (tmp_path / "discount_study.png").read_bytes()[:4] == b"\x89PNG"
