"""Shared fixtures: RL2's process group and wandb as RL2 expects them, the GPU-only import stand-ins.

RL2 0.0.2's rollout and loggers call ``torch.distributed`` (rank, barrier, a CPU device
mesh) and ``wandb.log``; a one-process gloo group and a disabled wandb run are the real
components, on the CPU.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from standins import install_gpu_import_standins

from gem_core.testing_servers import free_port

install_gpu_import_standins()

THIRD_PARTY_WARNINGS = [
    # wandb's and hydra's own deprecations, raised while importing them (not from gem code).
    r"ignore::DeprecationWarning:wandb\..*",
    r"ignore::DeprecationWarning:pydantic\..*",
    r"ignore:.*pkg_resources is deprecated.*:UserWarning",
    # torchdata 0.11's StatefulDataLoader (RL2's dataloader) calls torch.set_vital, which torch 2.13 deprecates.
    r"ignore:'set_vital' is deprecated:UserWarning",
]


def pytest_configure(config: pytest.Config) -> None:
    for line in THIRD_PARTY_WARNINGS:
        config.addinivalue_line("filterwarnings", line)


@pytest.fixture(scope="session")
def rl2_process_group() -> Iterator[None]:
    """A one-rank gloo group (RL2's rollout asks for ranks, barriers and a CPU device mesh) and a disabled wandb run."""
    import torch.distributed as dist
    import wandb

    os.environ.setdefault("LOCAL_RANK", "0")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    run = wandb.init(mode="disabled")
    try:
        yield
    finally:
        run.finish()
        dist.destroy_process_group()


@pytest.fixture
def event_loop_set() -> Iterator[asyncio.AbstractEventLoop]:
    """RL2 0.0.2 runs its rollout with ``asyncio.get_event_loop().run_until_complete``: give it a current loop."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield loop
    finally:
        asyncio.set_event_loop(None)
        loop.close()
