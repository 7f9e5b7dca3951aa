"""Test setup: the tests import their helpers (``standins``, ``harness``) from this folder.

Warnings from third-party imports are filtered one message at a time, so a warning
from gem code still fails a test (the project runs with warnings as errors).
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

THIRD_PARTY_WARNINGS = [
    # openrlhf/models/utils.py decorates a function with @torch.compile at import; torch's inductor
    # import then trips over its own deprecated torch.jit.script_method.
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning",
]


def pytest_configure(config: pytest.Config) -> None:
    for line in THIRD_PARTY_WARNINGS:
        config.addinivalue_line("filterwarnings", line)


@pytest.fixture
def rebn_patched(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Gem's ReBN installed on OpenRLHF's experience maker for one test, the way the Ray setup hook does it."""
    from gem_openrlhf import patch
    from harness import experience_maker

    maker = experience_maker.RemoteExperienceMaker
    saved = dict(maker.__dict__)
    monkeypatch.setenv(patch.ESTIMATOR_ENV, "rebn")
    patch.install()
    yield maker
    for name in ("compute_advantages_and_returns", "_openrlhf_compute_advantages_and_returns"):
        if name in saved:
            setattr(maker, name, saved[name])
        elif name in maker.__dict__:
            delattr(maker, name)
