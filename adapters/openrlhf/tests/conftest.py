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
    # Ray 2.55's ray.init() announces a future change of its accelerator env var handling.
    "ignore:Tip. In future versions of Ray:FutureWarning",
    # ray.init() starts its node processes with /dev/null as their output and keeps them past the test.
    r"ignore:unclosed file <_io\.\w+ name='/dev/null':ResourceWarning",
    r"ignore:subprocess \d+ is still running:ResourceWarning",
]


def pytest_configure(config: pytest.Config) -> None:
    for line in THIRD_PARTY_WARNINGS:
        config.addinivalue_line("filterwarnings", line)


@pytest.fixture(scope="session")
def local_ray():  # type: ignore[no-untyped-def]
    """Ray with its default resources on this machine (no dashboard, no log forwarding), once per session."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture
def rebn_patched(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Gem's ReBN and step guards installed in OpenRLHF for one test, the way the Ray setup hook does it."""
    import openrlhf.utils.loss_utils as loss_utils
    from gem_openrlhf import patch
    from harness import experience_maker
    from openrlhf.trainer.ray import ppo_actor

    maker = experience_maker.RemoteExperienceMaker
    saved = dict(maker.__dict__)
    monkeypatch.setattr(loss_utils, "_optimizer_step_loss_norm", loss_utils._optimizer_step_loss_norm)
    monkeypatch.setattr(ppo_actor.ActorPPOTrainer, "training_step", ppo_actor.ActorPPOTrainer.training_step)
    monkeypatch.setenv(patch.ESTIMATOR_ENV, "rebn")
    patch.install()
    yield maker
    for name in (
        "compute_advantages_and_returns",
        "_openrlhf_compute_advantages_and_returns",
        "make_experience_batch",
        "_openrlhf_make_experience_batch",
    ):
        if name in saved:
            setattr(maker, name, saved[name])
        elif name in maker.__dict__:
            delattr(maker, name)
