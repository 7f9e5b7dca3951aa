"""gem_core.bridges and ``gem plugins --bridges``: which bridges work here, on what, and the fix when one does not.

The first tests give the check made-up metadata; the last reads this environment's own (core: no bridge package;
packages: gem-openenv, gem-verifiers and gem-tool-mcp together, without OpenEnv's SDK).
"""

from __future__ import annotations

import importlib.util
import io
import json

import pytest

from gem_core.bridges import BRIDGES, Bridge, bridge_status
from gem_core.cli import main

BRIDGE = Bridge("a thing", "gem-thing", "gem_core", "pip install -e plugins/thing", conflict="other pins x<2")
REQUIRES = ["gem-core", "x>=2,<3", 'pytest>=8; extra == "test"', 'y==1.0; extra == "y"']


def versions(**installed: str) -> object:
    table = {"gem-thing": "0.1.0", "gem-core": "0.1.0", **{k.replace("_", "-"): v for k, v in installed.items()}}
    return lambda name: table.get(name)


@pytest.mark.parametrize(
    ("installed", "problem"),
    [
        ({"x": "2.3"}, None),
        ({}, "x<3,>=2 is not installed: pip install -e plugins/thing (beware: other pins x<2)"),
        ({"x": "1.9"}, "x 1.9 is installed, gem-thing needs x<3,>=2 (other pins x<2)"),
        ({"x": "3.0"}, "x 3.0 is installed, gem-thing needs x<3,>=2 (other pins x<2)"),
    ],
    ids=["in-range", "missing", "below", "above"],
)
def test_a_requirement_out_of_its_range_names_the_versions_and_the_conflict(installed: dict, problem: str) -> None:
    status = bridge_status(BRIDGE, versions(**installed), lambda _: REQUIRES)
    assert status.problems == ([problem] if problem else [])
    assert status.usable is (problem is None)
    assert "pytest>=8" not in status.requirements  # another extra's requirement is not the bridge's


def test_an_extra_brings_its_own_requirements() -> None:
    bridge = Bridge("with y", "gem-thing", "gem_core", "pip install -e 'plugins/thing[y]'", extra="y")
    status = bridge_status(bridge, versions(x="2.0"), lambda _: REQUIRES)
    assert status.problems == ["y==1.0 is not installed: pip install -e 'plugins/thing[y]'"]
    assert bridge_status(bridge, versions(x="2.0", y="1.0"), lambda _: REQUIRES).usable


def test_a_package_not_installed_says_how_to_install_it() -> None:
    status = bridge_status(BRIDGE, lambda _: None, lambda _: [])
    assert not status.usable and status.problems == ["gem-thing is not installed: pip install -e plugins/thing"]


def test_a_missing_module_is_not_usable() -> None:
    bridge = Bridge("gone", "gem-thing", "gem_no_such_module", "pip install -e plugins/thing")
    assert bridge_status(bridge, versions(), lambda _: []).problems == [
        "the module gem_no_such_module is not found: pip install -e plugins/thing"
    ]


def test_gem_plugins_bridges_reports_this_environment() -> None:
    out = io.StringIO()
    assert main(["plugins", "--bridges", "--json"], stdout=out, stderr=io.StringIO()) == 0
    rows = {(row["distribution"], row["extra"]): row for row in json.loads(out.getvalue())}
    assert len(rows) == len(BRIDGES)
    for (dist, _extra), row in rows.items():
        if row["version"] is None:
            assert not row["usable"] and row["problems"][0].startswith(f"{dist} is not installed: pip install")
    if importlib.util.find_spec("gem_verifiers") is not None:  # the packages env: the three bridges together
        for key in (("gem-openenv", None), ("gem-verifiers", None), ("gem-tool-mcp", None)):
            assert rows[key]["usable"], rows[key]
        assert rows[("gem-verifiers", None)]["versions"]["verifiers"] == "0.4.0"
        sdk = rows[("gem-openenv", "openenv")]
        assert not sdk["usable"] and "mcp<2" in sdk["problems"][0]  # OpenEnv's SDK: the exact conflict
    else:  # the core env: no bridge package is installed
        assert not any(row["usable"] for row in rows.values())
    text = io.StringIO()
    main(["plugins", "--bridges"], stdout=text, stderr=io.StringIO())
    assert "OpenEnv protocol (gem serve, openenv:* ids)  [gem-openenv " in text.getvalue()
