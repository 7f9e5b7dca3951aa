"""Every test that may start Ray shares one pytest-xdist worker (tests/vector/conftest.py).

A second worker starting a second local Ray instance on a 2-core machine doubles Ray's daemons, and
under load its start times out (the raylet gives up waiting for its agent), failing every Ray test there.
"""

from __future__ import annotations

import pytest


def may_start_ray(item: pytest.Item) -> bool:
    # by name (usefixtures or an argument), or a parametrized "ray" case that asks for it at run time
    return "ray_instance" in getattr(item, "fixturenames", ()) or "ray" in item.nodeid.lower()


def test_every_test_that_may_start_ray_is_in_the_ray_group(request: pytest.FixtureRequest) -> None:
    if not request.config.pluginmanager.hasplugin("xdist"):
        pytest.skip("the grouping applies only where pytest-xdist is installed")
    items = [item for item in request.session.items if may_start_ray(item)]
    ungrouped = [item.nodeid for item in items if [m.args for m in item.iter_markers("xdist_group")] != [("ray",)]]
    assert items and not ungrouped, ungrouped
