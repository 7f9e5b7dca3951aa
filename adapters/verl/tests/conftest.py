"""Warnings verl 0.9.1 and its dependencies raise on import; the project runs tests with warnings as errors.

Each filter names one third-party message, so a warning from gem code still fails a test.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The shared harness (verl_harness.py) sits next to the tests; pytest runs with --import-mode=importlib.
sys.path.insert(0, str(Path(__file__).parent))

THIRD_PARTY_WARNINGS = [
    # verl.single_controller.ray imports ray.experimental.state (ray >= 2.4x moved it).
    "ignore:Ray state API is no longer experimental:DeprecationWarning",
    # verl.workers.engine announces every optional training engine it cannot import (GPU-only ones).
    r"ignore:(torchtitan|veomni|automodel|mindspeed|megatron) engine is not available:UserWarning",
    # transformers 5.10's processor __call__ (verl's worker re-encoding a sample's images) does np.array() on
    # torch's tensors, whose __array__ predates numpy 2's copy keyword.
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning",
]


def pytest_configure(config: pytest.Config) -> None:
    for line in THIRD_PARTY_WARNINGS:
        config.addinivalue_line("filterwarnings", line)
