"""Terminal-Bench's default checker form: pytest on test_outputs.py (no run-tests.sh)."""

import sys
from pathlib import Path


def test_runs_on_python_3_13():
    # sum() of floats is exactly rounded from 3.12 on: 3.11 gives a different last digit here.
    assert sys.version_info >= (3, 13)


def test_total():
    expected = (Path(__file__).parent / "expected.txt").read_text().strip()
    assert Path("/app/total.txt").read_text().strip() == expected
