"""``gem list``'s cached listing: the same output as discovery, invalidated by any install change.

The plugins here are real distributions (a ``.dist-info`` folder and a module in a folder on
``sys.path``), as ``pip install`` leaves them, so ``importlib.metadata`` and the cache see the
same thing they see in a venv.
"""

from __future__ import annotations

import io
import json
import os
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gem_core import list_cache, plugins
from gem_core.cli import main

PLUGIN = """
import os

from gem_core import hookimpl
from gem_core.registry import EnvSpec, PluginManifest


@hookimpl
def plugin_manifest():
    return PluginManifest(api_version=1, namespaces=("{ns}",))


@hookimpl
def register_envs():
    return [EnvSpec(id="{ns}:{name}-v0", entry_point="gem_core.testing:NumberGuessEnv",
                    description=os.environ.get("GEM_TEST_PLUGIN_TEXT", "{text}"))]
"""


class Site:
    """A folder on ``sys.path`` to install plugin distributions into."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def install(self, ns: str, version: str, name: str = "Maze", text: str = "a maze", editable: bool = False) -> None:
        for old in self.root.glob(f"gem_{ns}-*.dist-info"):
            for f in old.iterdir():
                f.unlink()
            old.rmdir()
        info = self.root / f"gem_{ns}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: gem-{ns}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[gem_core]\n{ns} = gem_{ns}_plugin\n")
        if editable:
            (info / "direct_url.json").write_text(json.dumps({"url": "file:///src", "dir_info": {"editable": True}}))
        self.write_module(ns, name, text)

    def write_module(self, ns: str, name: str, text: str, mtime: int | None = None) -> None:
        module = self.root / f"gem_{ns}_plugin.py"
        module.write_text(PLUGIN.format(ns=ns, name=name, text=text))
        if mtime is not None:
            os.utime(module, ns=(mtime, mtime))
        sys.modules.pop(f"gem_{ns}_plugin", None)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("GEM_CORE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GEM_CORE_LIST_CACHE", raising=False)
    yield Site(root)
    for module in [m for m in sys.modules if m.startswith("gem_") and m.endswith("_plugin")]:
        del sys.modules[module]
    plugins.reset_registry()


def gem_list(*args: str) -> str:
    """``gem list`` as a fresh process would run it: no registry built yet."""
    plugins.reset_registry()
    out, err = io.StringIO(), io.StringIO()
    assert main(["list", *args], stdout=out, stderr=err) == 0, err.getvalue()
    return out.getvalue()


def uncached(*args: str, monkeypatch: pytest.MonkeyPatch) -> str:
    with monkeypatch.context() as m:
        m.setenv("GEM_CORE_LIST_CACHE", "0")
        return gem_list(*args)


def test_a_second_listing_comes_from_the_cache_without_importing_plugins(site: Site) -> None:
    site.install("ladder", "1.0")
    first = gem_list()
    assert "ladder:Maze-v0" in first and os.path.exists(list_cache.cache_file())
    sys.modules.pop("gem_ladder_plugin", None)
    assert gem_list() == first
    assert "gem_ladder_plugin" not in sys.modules  # listed from the cache: the plugin was not imported


@pytest.mark.parametrize("args", [(), ("--json",), ("-n", "ladder"), ("-t", "reference"), ("-n", "none")])
def test_cached_output_is_discovery_output(site: Site, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]) -> None:
    site.install("ladder", "1.0")
    gem_list(*args)  # fills the cache
    assert gem_list(*args) == uncached(*args, monkeypatch=monkeypatch)


@pytest.mark.parametrize(
    "change",
    ["new version", "another distribution", "uninstalled", "editable source edited", "switches", "plugin setting"],
)
def test_an_install_change_invalidates(site: Site, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    site.install("ladder", "1.0", editable=True)
    before = gem_list()
    if change == "new version":
        site.install("ladder", "2.0", name="Tower", text="a tower")
        expected, gone = "ladder:Tower-v0", "ladder:Maze-v0"
    elif change == "another distribution":
        site.install("rope", "0.1")
        expected, gone = "rope:Maze-v0", None
    elif change == "uninstalled":
        for f in (site.root / "gem_ladder-1.0.dist-info").iterdir():
            f.unlink()
        (site.root / "gem_ladder-1.0.dist-info").rmdir()
        expected, gone = "core:NumberGuess-v0", "ladder:Maze-v0"
    elif change == "editable source edited":  # same version, new code
        site.write_module("ladder", "Maze", "a maze, now with ropes", mtime=1_000_000_000_000_000_000)
        expected, gone = "now with ropes", None
    elif change == "switches":
        monkeypatch.setenv("GEM_CORE_BLOCK_PLUGINS", "ladder")
        expected, gone = "core:NumberGuess-v0", "ladder:Maze-v0"
    else:  # a GEM_* variable a plugin reads its registrations from (as gem-openenv's GEM_OPENENV_SERVERS)
        monkeypatch.setenv("GEM_TEST_PLUGIN_TEXT", "a maze the environment describes")
        expected, gone = "a maze the environment describes", None
    after = gem_list()
    assert after != before and expected in after and (gone is None or gone not in after)
    assert after == uncached(monkeypatch=monkeypatch)


def test_an_unwritable_cache_is_skipped_silently(site: Site, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    site.install("ladder", "1.0")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("GEM_CORE_CACHE_DIR", str(blocker / "cache"))
    assert gem_list() == gem_list() == uncached(monkeypatch=monkeypatch)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    garbage=st.one_of(
        st.binary(max_size=200),
        st.builds(
            lambda rows: json.dumps({"key": None, "rows": json.dumps({"envs": rows, "aliases": []})}).encode(),
            st.lists(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5)), max_size=3),
        ),
    ),
    flip=st.integers(min_value=0),
)
def test_a_corrupt_cache_falls_back_to_discovery(
    site: Site, monkeypatch: pytest.MonkeyPatch, garbage: bytes, flip: int
) -> None:
    site.install("ladder", "1.0")
    expected = uncached(monkeypatch=monkeypatch)
    gem_list()
    path = Path(list_cache.cache_file())
    data = json.loads(path.read_text())
    path.write_bytes(garbage)
    assert gem_list() == expected
    # The right key, but one character of the rows changed: the checksum refuses it.
    rows = data["rows"]
    at = flip % len(rows)
    data["rows"] = rows[:at] + ("x" if rows[at] != "x" else "y") + rows[at + 1 :]
    path.write_text(json.dumps(data))
    assert gem_list() == expected
    # The right key and checksum, rows of the wrong types (a hand-made file): refused too.
    data["rows"] = json.dumps({"envs": [{**row, "description": 7} for row in json.loads(rows)["envs"]], "aliases": []})
    data["crc32"] = zlib.crc32(data["rows"].encode())
    path.write_text(json.dumps(data))
    assert gem_list() == expected


def test_no_cache_while_a_plugin_has_problems(site: Site) -> None:
    site.install("ladder", "1.0")
    (site.root / "gem_ladder_plugin.py").write_text("raise ImportError('broken on purpose')\n")
    sys.modules.pop("gem_ladder_plugin", None)
    out = gem_list()
    assert "ladder:Maze-v0" not in out and not os.path.exists(list_cache.cache_file())


def test_runtime_registrations_are_listed(site: Site) -> None:
    import gem_core

    site.install("ladder", "1.0")
    gem_list()
    gem_core.register("runtime:Extra-v0", "gem_core.testing:NumberGuessEnv")
    out = io.StringIO()
    assert main(["list"], stdout=out) == 0  # the registry exists in this process: no cache
    assert "runtime:Extra-v0" in out.getvalue()
