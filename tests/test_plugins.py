"""Plugin discovery with fake entry points (no install); the real-venv test is test_plugin_venv.py."""

from __future__ import annotations

import importlib.metadata as md
import sys
import types
from collections.abc import Callable
from typing import Any

import pytest

import gem_core
from gem_core import hookimpl, plugins
from gem_core.errors import DuplicateIdError, PluginLoadError, PluginWarning
from gem_core.plugins import PluginSettings, build_registry
from gem_core.registry import EnvAlias, EnvSpec, ToolSpec

REF = "gem_core.testing:NumberGuessEnv"


class FakeDist(md.Distribution):
    def __init__(self, name: str, version: str) -> None:
        self._meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"

    def read_text(self, filename: str) -> str | None:
        return self._meta if filename in {"METADATA", "PKG-INFO"} else None

    def locate_file(self, path: Any) -> Any:
        return path


def fake_ep(name: str, module: str, dist: str = "fake-dist", version: str = "1.2.3") -> md.EntryPoint:
    ep = md.EntryPoint(name=name, value=module, group="gem_core")
    return ep._for(FakeDist(dist, version))  # type: ignore[attr-defined, no-any-return]


def install_module(monkeypatch: pytest.MonkeyPatch, name: str, **hooks: Callable[..., Any]) -> None:
    module = types.ModuleType(name)
    for hook_name, fn in hooks.items():
        setattr(module, hook_name, hookimpl(fn))
    monkeypatch.setitem(sys.modules, name, module)


@pytest.fixture
def two_plugins(monkeypatch: pytest.MonkeyPatch) -> list[md.EntryPoint]:
    install_module(
        monkeypatch,
        "fake_games",
        register_envs=lambda: [
            EnvSpec(id="fake:Maze-v0", entry_point=REF, tags=("multi-turn",)),
            EnvAlias(id="fake:OldMaze-v0", target="fake:Maze-v0", deprecated=True),
        ],
    )
    install_module(monkeypatch, "fake_tools", register_tools=lambda: ToolSpec(name="calc", entry_point=dict))
    return [fake_ep("games", "fake_games", "gem-fake-games", "0.3"), fake_ep("tools", "fake_tools", "gem-fake-tools")]


def test_entry_points_register_with_owner(two_plugins: list[md.EntryPoint]) -> None:
    registry, infos = build_registry(PluginSettings(), entry_points=two_plugins)
    spec = registry.spec("fake:Maze-v0")
    assert (spec.distribution, spec.plugin) == ("gem-fake-games", "games")
    assert "calc" in registry.tools
    assert "core:NumberGuess-v0" in registry.envs  # built-ins through the same hooks
    by_name = {i.name: i for i in infos}
    assert by_name["games"].version == "0.3"
    assert by_name["games"].registered == {"envs": ["fake:Maze-v0", "fake:OldMaze-v0"]}
    assert by_name["tools"].registered == {"tools": ["calc"]}
    assert by_name["gem_core.builtin"].builtin


def test_entry_points_are_loaded_once(two_plugins: list[md.EntryPoint], monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[str] = []
    original = md.EntryPoint.load

    def counting_load(self: md.EntryPoint) -> Any:
        loads.append(self.name)
        return original(self)

    monkeypatch.setattr(md.EntryPoint, "load", counting_load)
    build_registry(PluginSettings(), entry_points=two_plugins)
    assert sorted(loads) == ["games", "tools"]


def test_autoload_off(two_plugins: list[md.EntryPoint]) -> None:
    registry, infos = build_registry(PluginSettings(autoload=False), entry_points=two_plugins)
    assert "fake:Maze-v0" not in registry.envs
    assert "core:NumberGuess-v0" in registry.envs
    assert [i.name for i in infos] == ["gem_core.builtin"]


@pytest.mark.parametrize(
    ("settings", "loaded", "status"),
    [
        (PluginSettings(allow=frozenset({"games"})), {"games"}, {"tools": "not allowed"}),
        (PluginSettings(allow=frozenset({"gem-fake-tools"})), {"tools"}, {"games": "not allowed"}),
        (PluginSettings(block=frozenset({"tools"})), {"games"}, {"tools": "blocked"}),
        (PluginSettings(block=frozenset({"gem-fake-games"})), {"tools"}, {"games": "blocked"}),
    ],
    ids=["allow-by-name", "allow-by-dist", "block-by-name", "block-by-dist"],
)
def test_allow_and_block(
    two_plugins: list[md.EntryPoint], settings: PluginSettings, loaded: set[str], status: dict[str, str]
) -> None:
    _, infos = build_registry(settings, entry_points=two_plugins)
    by_name = {i.name: i for i in infos}
    assert {n for n, i in by_name.items() if i.status == "loaded" and not i.builtin} == loaded
    for name, state in status.items():
        assert by_name[name].status == state


def test_settings_from_env() -> None:
    s = PluginSettings.from_env(
        {
            "GEM_CORE_DISABLE_PLUGIN_AUTOLOAD": "1",
            "GEM_CORE_PLUGINS": "a, b",
            "GEM_CORE_BLOCK_PLUGINS": "c",
            "GEM_CORE_SKIP_BROKEN_PLUGINS": "true",
        }
    )
    assert s == PluginSettings(False, frozenset({"a", "b"}), frozenset({"c"}), True, False)
    assert PluginSettings.from_env({}) == PluginSettings()


def test_broken_import_names_entry_point_distribution_and_version(monkeypatch: pytest.MonkeyPatch) -> None:
    eps = [fake_ep("broken", "fake_missing_module_xyz", "gem-broken", "9.9")]
    with pytest.raises(PluginLoadError) as err:
        build_registry(PluginSettings(), entry_points=eps)
    msg = str(err.value)
    assert "'broken'" in msg and "gem-broken 9.9" in msg and "fake_missing_module_xyz" in msg


def test_broken_plugin_skipped_with_warning(two_plugins: list[md.EntryPoint]) -> None:
    eps = [*two_plugins, fake_ep("broken", "fake_missing_module_xyz", "gem-broken", "9.9")]
    with pytest.warns(PluginWarning, match="gem-broken 9.9"):
        registry, infos = build_registry(PluginSettings(skip_broken=True), entry_points=eps)
    assert "fake:Maze-v0" in registry.envs  # the others still work
    broken = next(i for i in infos if i.name == "broken")
    assert broken.status == "broken" and broken.error is not None


def test_raising_hook_is_attributed(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom() -> list[EnvSpec]:
        raise RuntimeError("kaboom")

    install_module(monkeypatch, "fake_raises", register_envs=boom)
    with pytest.raises(PluginLoadError, match=r"'raises' from gem-raises 1\.2\.3: hook register_envs failed.*kaboom"):
        build_registry(PluginSettings(), entry_points=[fake_ep("raises", "fake_raises", "gem-raises")])


def test_invalid_declaration_is_attributed(monkeypatch: pytest.MonkeyPatch) -> None:
    install_module(monkeypatch, "fake_bad", register_envs=lambda: ["not a spec"])
    with pytest.raises(PluginLoadError, match="'bad'.*returned str, expected EnvSpec or EnvAlias"):
        build_registry(PluginSettings(), entry_points=[fake_ep("bad", "fake_bad")])


def test_dict_declarations_are_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    install_module(monkeypatch, "fake_dict", register_envs=lambda: [{"id": "dict:Env-v0", "entry_point": REF}])
    registry, _ = build_registry(PluginSettings(), entry_points=[fake_ep("dict", "fake_dict")])
    assert registry.spec("dict:Env-v0").plugin == "dict"
    install_module(monkeypatch, "fake_baddict", register_envs=lambda: [{"id": "dict:Env-v0", "entry_pont": REF}])
    with pytest.raises(PluginLoadError, match="entry_pont"):
        build_registry(PluginSettings(), entry_points=[fake_ep("baddict", "fake_baddict")])


def test_duplicate_id_across_plugins_names_both(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("one", "two"):
        install_module(monkeypatch, f"fake_{name}", register_envs=lambda: [EnvSpec(id="dup:Env-v0", entry_point=REF)])
    eps = [fake_ep("one", "fake_one", "gem-one", "1.0"), fake_ep("two", "fake_two", "gem-two", "2.0")]
    with pytest.raises(DuplicateIdError, match=r"one \(gem-one\).*two \(gem-two\)"):
        build_registry(PluginSettings(), entry_points=eps)
    with pytest.warns(PluginWarning, match="Keeping the first"):
        registry, _ = build_registry(PluginSettings(skip_broken=True), entry_points=eps)
    assert registry.spec("dup:Env-v0").plugin == "one"


def test_discovery_is_lazy(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = plugins.build_registry

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(plugins, "build_registry", spy)
    import gem_core.api

    assert calls == []
    gem_core.list_envs()
    gem_core.make("core:NumberGuess-v0")
    assert calls == [1]


def test_runtime_register_goes_into_the_process_registry() -> None:
    gem_core.register("runtime:Thing-v0", REF, description="added at runtime")
    assert "runtime:Thing-v0" in gem_core.list_envs(namespace="runtime")
    assert gem_core.spec("runtime:Thing-v0").owner == "<registered at runtime>"


def test_hookspecs_are_documented_and_tested() -> None:
    """Every hook has a docstring with a Returns section and a test below that calls it."""
    from gem_core import hookspecs

    names = [n for n in dir(hookspecs) if n.startswith("register_")]
    assert names == ["register_envs", "register_tools", "register_wrappers"]
    from pathlib import Path

    source = Path(__file__).read_text()
    for name in names:
        doc = getattr(hookspecs, name).__doc__ or ""
        assert "Returns:" in doc, name
        assert f"{name}=" in source or f'"{name}"' in source, f"no test exercises hook {name}"


def test_hook_register_wrappers(monkeypatch: pytest.MonkeyPatch) -> None:
    from gem_core.registry import WrapperSpec

    install_module(
        monkeypatch, "fake_wrap", register_wrappers=lambda: [WrapperSpec(name="tag", entry_point=lambda env: env)]
    )
    registry, infos = build_registry(PluginSettings(), entry_points=[fake_ep("wrap", "fake_wrap")])
    assert "tag" in registry.wrappers
    assert next(i for i in infos if i.name == "wrap").registered == {"wrappers": ["tag"]}
