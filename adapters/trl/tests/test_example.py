"""The example script runs end to end, as the README's demo command runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trl_train.py"


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["rebn", "grpo"], ids=["rebn", "grpo"])
def test_example_prints_reward_per_step(tmp_path: Path, estimator: str) -> None:
    argv = [sys.executable, "-W", "error", str(EXAMPLE), "--env", "core:NumberGuess-v0", "--steps", "2"]
    argv += ["--batch", "4", "--generations", "2", "--warmup-steps", "2", "--turn-tokens", "6"]
    argv += ["--estimator", estimator, "--output-dir", str(tmp_path)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    steps = re.findall(r"^\s+(\d)/2\s+(-?\d+\.\d+)\s", result.stdout, flags=re.M)
    assert [s for s, _ in steps] == ["1", "2"], result.stdout
    assert "warm-up: 2 supervised steps" in result.stdout
