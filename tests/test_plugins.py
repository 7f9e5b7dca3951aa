"""Plugin discovery with fake entry points (no install); the real-venv test is test_plugin_venv.py."""

from __future__ import annotations

import importlib.metadata as md
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import gem_core
from gem_core import plugins
from gem_core.errors import DuplicateIdError, NamespaceError, PluginLoadError, PluginWarning
from gem_core.plugins import PluginSettings, build_registry
from gem_core.registry import EnvAlias, EnvSpec, ToolSpec

if TYPE_CHECKING:
    from tests.conftest import Fakes

REF = "gem_core.testing:NumberGuessEnv"
SKIPPED = " (skipped because GEM_CORE_SKIP_BROKEN_PLUGINS is set)"


@pytest.fixture
def two_plugins(fakes: Fakes) -> list[md.EntryPoint]:
    fakes.module(
        "fake_games",
        register_envs=lambda: [
            EnvSpec(id="fake:Maze-v0", entry_point=REF, tags=("multi-turn",)),
            EnvAlias(id="fake:OldMaze-v0", target="fake:Maze-v0", deprecated=True),
        ],
    )
    fakes.module("fake_tools", register_tools=lambda: ToolSpec(name="calc", entry_point=dict))
    return [fakes.ep("games", "fake_games", "gem-fake-games", "0.3"), fakes.ep("tools", "fake_tools", "gem-fake-tools")]


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


def test_broken_import_names_entry_point_distribution_and_version(fakes: Fakes) -> None:
    eps = [fakes.ep("broken", "fake_missing_module_xyz", "gem-broken", "9.9")]
    with pytest.raises(PluginLoadError) as err:
        build_registry(PluginSettings(), entry_points=eps)
    msg = str(err.value)
    assert "'broken'" in msg and "gem-broken 9.9" in msg and "fake_missing_module_xyz" in msg


def test_broken_plugin_skipped_with_warning(two_plugins: list[md.EntryPoint], fakes: Fakes) -> None:
    eps = [*two_plugins, fakes.ep("broken", "fake_missing_module_xyz", "gem-broken", "9.9")]
    with pytest.warns(PluginWarning, match="gem-broken 9.9"):
        registry, infos = build_registry(PluginSettings(skip_broken=True), entry_points=eps)
    assert "fake:Maze-v0" in registry.envs  # the others still work
    broken = next(i for i in infos if i.name == "broken")
    assert broken.status == "broken" and broken.error is not None


def test_raising_hook_is_attributed(fakes: Fakes) -> None:
    def boom() -> list[EnvSpec]:
        raise RuntimeError("kaboom")

    fakes.module("fake_raises", register_envs=boom)
    with pytest.raises(PluginLoadError, match=r"'raises' from gem-raises 1\.2\.3: hook register_envs failed.*kaboom"):
        build_registry(PluginSettings(), entry_points=[fakes.ep("raises", "fake_raises", "gem-raises")])


def test_invalid_declaration_is_attributed(fakes: Fakes) -> None:
    fakes.module("fake_bad", register_envs=lambda: ["not a spec"])
    with pytest.raises(PluginLoadError, match="'bad'.*returned str, expected EnvSpec or EnvAlias"):
        build_registry(PluginSettings(), entry_points=[fakes.ep("bad", "fake_bad")])


def test_dict_declarations_are_validated(fakes: Fakes) -> None:
    fakes.module("fake_dict", register_envs=lambda: [{"id": "dict:Env-v0", "entry_point": REF}])
    registry, _ = build_registry(PluginSettings(), entry_points=[fakes.ep("dict", "fake_dict")])
    assert registry.spec("dict:Env-v0").plugin == "dict"
    fakes.module("fake_baddict", register_envs=lambda: [{"id": "dict:Env-v0", "entry_pont": REF}])
    with pytest.raises(PluginLoadError, match="entry_pont"):
        build_registry(PluginSettings(), entry_points=[fakes.ep("baddict", "fake_baddict")])


def test_duplicate_id_across_plugins_names_both(fakes: Fakes) -> None:
    for name in ("one", "two"):
        fakes.module(f"fake_{name}", register_envs=lambda: [EnvSpec(id="dup:Env-v0", entry_point=REF)])
    eps = [fakes.ep("one", "fake_one", "gem-one", "1.0"), fakes.ep("two", "fake_two", "gem-two", "2.0")]
    with pytest.raises(DuplicateIdError, match=r"one \(gem-one\).*two \(gem-two\)"):
        build_registry(PluginSettings(), entry_points=eps)
    with pytest.warns(PluginWarning, match="Keeping the first"):
        registry, _ = build_registry(PluginSettings(skip_broken=True), entry_points=eps)
    assert registry.spec("dup:Env-v0").plugin == "one"


def test_discovery_is_lazy(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = plugins.discover

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(plugins, "discover", spy)
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


def test_hook_register_wrappers(fakes: Fakes) -> None:
    from gem_core.registry import WrapperSpec

    fakes.module("fake_wrap", register_wrappers=lambda: [WrapperSpec(name="tag", entry_point=lambda env: env)])
    registry, infos = build_registry(PluginSettings(), entry_points=[fakes.ep("wrap", "fake_wrap")])
    assert "tag" in registry.wrappers
    assert next(i for i in infos if i.name == "wrap").registered == {"wrappers": ["tag"]}


def test_trace_switch_shows_each_hook_call_through_pluggy(
    two_plugins: list[md.EntryPoint], capsys: pytest.CaptureFixture[str]
) -> None:
    build_registry(PluginSettings.from_env({"GEM_CORE_TRACE_PLUGINS": "1"}), entry_points=two_plugins)
    err = capsys.readouterr().err
    assert "calling register_envs() of plugin 'games' from gem-fake-games 0.3" in err
    assert "register_envs returned ['fake:Maze-v0', 'fake:OldMaze-v0']" in err
    assert "calling register_tools() of plugin 'tools' from gem-fake-tools 1.2.3" in err
    build_registry(PluginSettings(), entry_points=two_plugins)
    assert capsys.readouterr().err == ""  # off by default


def test_trace_shows_a_raising_hook(fakes: Fakes, capsys: pytest.CaptureFixture[str]) -> None:
    def boom() -> None:
        raise RuntimeError("kaboom")

    fakes.module("fake_boom", register_envs=boom)
    with pytest.raises(PluginLoadError):
        build_registry(PluginSettings(trace=True), entry_points=[fakes.ep("boom", "fake_boom")])
    assert "register_envs raised RuntimeError('kaboom')" in capsys.readouterr().err


def write_package(root: Path, name: str, plugin_source: str) -> Path:
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("")
    path = root / name / "plugin.py"
    path.write_text(plugin_source)
    return path


@pytest.mark.parametrize(
    ("source", "line"),
    [
        ("import gem_core\nimport a_dependency_nobody_installed_xyz\n", 2),
        (
            "from gem_core import hookimpl\n\n@hookimpl\ndef register_envs():\n    raise RuntimeError('bad hook')\n",
            5,
        ),
    ],
    ids=["import-fails", "hook-raises"],
)
def test_skip_warning_points_at_the_plugin_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakes: Fakes, source: str, line: int
) -> None:
    name = f"gem_attr_{line}"
    path = write_package(tmp_path, name, source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(PluginWarning) as record:
        build_registry(PluginSettings(skip_broken=True), entry_points=[fakes.ep("attr", f"{name}.plugin")])
    assert (record[0].filename, record[0].lineno) == (str(path), line)


@pytest.mark.parametrize(
    ("module", "hint"),
    [
        ("fake_missing_module_xyz", "pip install fake_missing_module_xyz"),
        ("gem_core.no_such_submodule", "Upgrade or reinstall gem-broken"),
    ],
    ids=["missing-dependency", "other-import-error"],
)
def test_load_error_carries_hint(fakes: Fakes, module: str, hint: str) -> None:
    with pytest.raises(PluginLoadError) as err:
        build_registry(PluginSettings(), entry_points=[fakes.ep("broken", module, "gem-broken", "9.9")])
    assert hint in err.value.hint and hint in str(err.value)
    assert "GEM_CORE_BLOCK_PLUGINS=broken" in err.value.hint
    assert (err.value.plugin, err.value.distribution, err.value.version) == ("broken", "gem-broken", "9.9")


def test_one_broken_plugin_leaves_the_others_in_the_discovery(two_plugins: list[md.EntryPoint], fakes: Fakes) -> None:
    eps = [*two_plugins, fakes.ep("broken", "fake_missing_module_xyz", "gem-broken", "9.9")]
    found = plugins.discover(PluginSettings(), entry_points=eps)
    assert "fake:Maze-v0" in found.registry.envs
    assert [p.name for p in found.broken] == ["broken"]
    assert [p.plugin for p in found.problems] == ["broken"]
    with pytest.raises(PluginLoadError):
        found.raise_if_broken()


def owner_and_intruder(fakes: Fakes, intruder_name: str) -> list[md.EntryPoint]:
    from gem_core.registry import PluginManifest

    fakes.module(
        "fake_owner",
        plugin_manifest=lambda: PluginManifest(api_version=1, namespaces=("game",)),
        register_envs=lambda: [EnvSpec(id="game:Sudoku-v0-easy", entry_point=REF, description="real")],
    )
    fakes.module(
        "fake_intruder",
        register_envs=lambda: [
            EnvSpec(id="game:Sudoku-v0-easy", entry_point=REF, description="impostor"),
            EnvSpec(id="mine:Own-v0", entry_point=REF),
        ],
    )
    return [fakes.ep("games", "fake_owner", "gem-games", "1.0"), fakes.ep(intruder_name, "fake_intruder", "gem-evil")]


@pytest.mark.parametrize("intruder_name", ["aaa", "zzz"], ids=["intruder-sorts-first", "intruder-sorts-last"])
@pytest.mark.parametrize("skip_broken", [False, True], ids=["strict", "skip-broken"])
def test_owned_namespace_refuses_other_distributions(fakes: Fakes, intruder_name: str, skip_broken: bool) -> None:
    eps = owner_and_intruder(fakes, intruder_name)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        found = plugins.discover(PluginSettings(skip_broken=skip_broken), entry_points=eps)
    assert [str(w.message) for w in record] == ([str(found.errors[0]) + SKIPPED] if skip_broken else [])
    assert found.registry.spec("game:Sudoku-v0-easy").description == "real"
    assert found.registry.spec("mine:Own-v0").distribution == "gem-evil"  # its own ids are fine
    (problem,) = found.problems
    assert problem.plugin == intruder_name and isinstance(problem.error, NamespaceError)
    assert "namespace 'game', which gem-games owns" in str(problem.error)
    assert found.info("games").namespaces == ["game"]  # type: ignore[union-attr]
    if skip_broken:
        found.raise_if_broken()  # skipped: nothing raised, the owner kept its id
    else:
        with pytest.raises(NamespaceError):
            found.raise_if_broken()


def test_two_distributions_claiming_one_namespace(fakes: Fakes) -> None:
    from gem_core.registry import PluginManifest

    for name in ("one", "two"):
        fakes.module(f"fake_{name}", plugin_manifest=lambda: PluginManifest(api_version=1, namespaces=("shared",)))
    eps = [fakes.ep("one", "fake_one", "gem-one"), fakes.ep("two", "fake_two", "gem-two")]
    with pytest.raises(NamespaceError, match="'shared' is claimed by gem-one and by gem-two"):
        build_registry(PluginSettings(), entry_points=eps)


def test_one_distribution_may_spread_a_namespace_over_entry_points(fakes: Fakes) -> None:
    from gem_core.registry import PluginManifest

    for name in ("a", "b"):
        fakes.module(
            f"fake_{name}",
            plugin_manifest=lambda: PluginManifest(api_version=1, namespaces=("mine",)),
            register_envs=lambda n=name: [EnvSpec(id=f"mine:{n.upper()}-v0", entry_point=REF)],
        )
    eps = [fakes.ep("a", "fake_a", "gem-mine"), fakes.ep("b", "fake_b", "gem-mine")]
    registry, _ = build_registry(PluginSettings(), entry_points=eps)
    assert registry.env_ids(namespace="mine") == ["mine:A-v0", "mine:B-v0"]


def test_runtime_register_into_an_owned_namespace_needs_override() -> None:
    with pytest.raises(NamespaceError, match="override=True"):
        gem_core.register("core:Mine-v0", REF)
    assert gem_core.register("core:Mine-v0", REF, override=True).id == "core:Mine-v0"
    gem_core.register("core:NumberGuess-v0", REF, override=True, description="replaced")
    assert gem_core.spec("core:NumberGuess-v0").description == "replaced"


@pytest.mark.parametrize(
    ("version", "fix"),
    [(2, "upgrade gem-core"), (0, "upgrade gem-old or install an older gem-core")],
    ids=["newer", "older"],
)
def test_plugin_api_version_is_checked(fakes: Fakes, version: int, fix: str) -> None:
    from gem_core.registry import PluginManifest

    fakes.module(
        "fake_old",
        plugin_manifest=lambda: PluginManifest(api_version=version),
        register_envs=lambda: [EnvSpec(id="old:Thing-v0", entry_point=REF)],
    )
    found = plugins.discover(PluginSettings(), entry_points=[fakes.ep("old", "fake_old", "gem-old", "0.9")])
    assert "old:Thing-v0" not in found.registry.envs
    message = str(found.errors[0])
    assert f"targets gem plugin API {version}" in message and "speaks API 1" in message and fix in message
    info = found.info("old")
    assert info is not None and (info.status, info.api_version) == ("broken", version)


@pytest.mark.parametrize(
    "manifest",
    [None, "a string", {"api_version": 1, "namespaces": ["Bad-Name"]}],
    ids=["none", "wrong-type", "bad-namespace"],
)
def test_invalid_manifest_is_attributed(fakes: Fakes, manifest: object) -> None:
    fakes.module("fake_manifest", plugin_manifest=lambda: manifest)
    with pytest.raises(PluginLoadError, match="'manifest'.*plugin_manifest"):
        build_registry(PluginSettings(), entry_points=[fakes.ep("manifest", "fake_manifest")])


DIR_PLUGIN = """
from gem_core import EnvSpec, hookimpl
from gem_core.testing import NumberGuessEnv


class DirEnv(NumberGuessEnv):
    pass


@hookimpl
def register_envs():
    return [EnvSpec(id="dirplug:Guess-v0", entry_point="dirplug:DirEnv")]
"""


def test_plugins_dir_loads_each_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "dirplug.py").write_text(DIR_PLUGIN)
    (tmp_path / "broken_one.py").write_text("raise RuntimeError('half written')\n")
    (tmp_path / "_private.py").write_text("raise RuntimeError('never imported')\n")
    monkeypatch.setenv("GEM_CORE_PLUGINS_DIR", str(tmp_path))
    monkeypatch.delitem(sys.modules, "dirplug", raising=False)
    found = plugins.discover(PluginSettings(autoload=False, plugin_dirs=(str(tmp_path),)))
    assert found.registry.make("dirplug:Guess-v0").reset(seed=0)[0].startswith("I picked")
    info = found.info("dirplug")
    assert info is not None and info.registered == {"envs": ["dirplug:Guess-v0"]}
    assert found.registry.spec("dirplug:Guess-v0").distribution == "plugin dirplug"
    broken = found.info("broken_one")
    assert broken is not None and broken.status == "broken" and "from the plugins folder" in (broken.error or "")
    assert found.info("_private") is None
    assert PluginSettings.from_env().plugin_dirs == (str(tmp_path),)


def test_plugins_dir_that_is_not_a_folder(tmp_path: Path) -> None:
    found = plugins.discover(PluginSettings(autoload=False, plugin_dirs=(str(tmp_path / "nope"),)))
    assert [p.plugin for p in found.problems] == [None]
    with pytest.raises(PluginLoadError, match="is not a folder"):
        found.raise_if_broken()
