from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# worker processes and Ray actors import the test envs by module name; spawn copies sys.path to workers
_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture(scope="session")
def ray_instance() -> Iterator[Any]:
    """A local Ray instance for the whole session, started as a user would: Ray's defaults (the machine's CPUs).

    Only the test modules' path (for the actors) and no dashboard or log forwarding are added.
    """
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    path = os.pathsep.join([_HERE, *sys.path])
    ray.init(
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path, "RAY_USAGE_STATS_ENABLED": "0"}},
    )
    yield ray
    ray.shutdown()
