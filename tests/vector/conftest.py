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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n 2 --dist loadgroup``, as tox runs the suite) every Ray test goes to one worker.

    A second local Ray instance on a 2-core machine doubles Ray's daemons and its start can time out; the
    other tests share the cores with the Ray worker instead.
    """
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if starts_ray(item):
            item.add_marker(pytest.mark.xdist_group("ray"))


def starts_ray(item: pytest.Item) -> bool:
    """Whether the test may start Ray: it asks for ``ray_instance``, or a ``ray`` case is in its id.

    The id alone missed tests that take the fixture by name (``usefixtures``) without ``ray`` in their
    name: they went to the other worker, which started a second instance.
    """
    return "ray_instance" in getattr(item, "fixturenames", ()) or "ray" in item.nodeid.lower()
