"""Plugin discovery with fake entry points (no install); the real-venv test is test_plugin_venv.py."""

from __future__ import annotations

import importlib.metadata as md
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gem_core
from gem_core import plugins
from gem_core.errors import DuplicateIdError, NamespaceError, PluginLoadError, PluginWarning
from gem_core.plugins import PluginSettings, build_registry
from gem_core.registry import EnvAlias, EnvSpec, ToolSpec

if TYPE_CHECKING:
    from tests.conftest import Fakes

REF = "gem_core.testing:NumberGuessEnv"
STRICT = PluginSettings(strict=True)


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
            "GEM_CORE_STRICT_PLUGINS": "true",
        }
    )
    assert s == PluginSettings(False, frozenset({"a", "b"}), frozenset({"c"}), True, False)
    assert PluginSettings.from_env({"GEM_CORE_SKIP_BROKEN_PLUGINS": "1"}) == PluginSettings()  # the default now
    assert PluginSettings.from_env({}) == PluginSettings()


def test_broken_import_names_entry_point_distribution_and_version(fakes: Fakes) -> None:
    eps = [fakes.ep("broken", "fake_missing_module_xyz", "gem-broken", "9.9")]
    with pytest.raises(PluginLoadError) as err:
        build_registry(STRICT, entry_points=eps)
    msg = str(err.value)
    assert "'broken'" in msg and "gem-broken 9.9" in msg and "fake_missing_module_xyz" in msg


def test_broken_plugin_skipped_with_warning(two_plugins: list[md.EntryPoint], fakes: Fakes) -> None:
    eps = [*two_plugins, fakes.ep("broken", "fake_missing_module_xyz", "gem-broken", "9.9")]
    with pytest.warns(PluginWarning, match="gem-broken 9.9"):
        registry, infos = build_registry(PluginSettings(), entry_points=eps)
    assert "fake:Maze-v0" in registry.envs  # the others still work
    broken = next(i for i in infos if i.name == "broken")
    assert broken.status == "broken" and broken.error is not None


def test_raising_hook_is_attributed(fakes: Fakes) -> None:
    def boom() -> list[EnvSpec]:
        raise RuntimeError("kaboom")

    fakes.module("fake_raises", register_envs=boom)
    with pytest.raises(PluginLoadError, match=r"'raises' from gem-raises 1\.2\.3: hook register_envs failed.*kaboom"):
        build_registry(STRICT, entry_points=[fakes.ep("raises", "fake_raises", "gem-raises")])


def test_invalid_declaration_is_attributed(fakes: Fakes) -> None:
    fakes.module("fake_bad", register_envs=lambda: ["not a spec"])
    with pytest.raises(PluginLoadError, match="'bad'.*returned str, expected EnvSpec or EnvAlias"):
        build_registry(STRICT, entry_points=[fakes.ep("bad", "fake_bad")])


def test_dict_declarations_are_validated(fakes: Fakes) -> None:
    fakes.module("fake_dict", register_envs=lambda: [{"id": "dict:Env-v0", "entry_point": REF}])
    registry, _ = build_registry(PluginSettings(), entry_points=[fakes.ep("dict", "fake_dict")])
    assert registry.spec("dict:Env-v0").plugin == "dict"
    fakes.module("fake_baddict", register_envs=lambda: [{"id": "dict:Env-v0", "entry_pont": REF}])
    with pytest.raises(PluginLoadError, match="entry_pont"):
        build_registry(STRICT, entry_points=[fakes.ep("baddict", "fake_baddict")])


def test_duplicate_id_across_plugins_names_both(fakes: Fakes) -> None:
    for name in ("one", "two"):
        fakes.module(f"fake_{name}", register_envs=lambda: [EnvSpec(id="dup:Env-v0", entry_point=REF)])
    eps = [fakes.ep("one", "fake_one", "gem-one", "1.0"), fakes.ep("two", "fake_two", "gem-two", "2.0")]
    with pytest.raises(DuplicateIdError, match=r"one \(gem-one\).*'two' from gem-two 2\.0"):
        build_registry(STRICT, entry_points=eps)
    with pytest.warns(PluginWarning, match="gem keeps 'one'.*Fix for the authors of gem-two") as record:
        registry, infos = build_registry(PluginSettings(), entry_points=eps)
    assert "override=True" not in str(record[0].message)  # a plugin cannot use it
    assert registry.spec("dup:Env-v0").plugin == "one"
    assert {i.name: i.status for i in infos if not i.builtin} == {"one": "loaded", "two": "partly loaded"}


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
    assert names == ["register_commands", "register_envs", "register_tools", "register_wrappers"]
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


def test_hook_register_commands(fakes: Fakes) -> None:
    from gem_core.registry import CommandSpec

    command = CommandSpec(name="hello", description="say hello", entry_point="gem_core.cli:main")
    fakes.module("fake_cmd", register_commands=lambda: [command])
    registry, infos = build_registry(PluginSettings(), entry_points=[fakes.ep("cmd", "fake_cmd")])
    assert registry.commands.get("hello") == command.model_copy(update={"distribution": "fake-dist", "plugin": "cmd"})
    assert next(i for i in infos if i.name == "cmd").registered == {"commands": ["hello"]}


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
        build_registry(PluginSettings(strict=True, trace=True), entry_points=[fakes.ep("boom", "fake_boom")])
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
        build_registry(PluginSettings(), entry_points=[fakes.ep("attr", f"{name}.plugin")])
    assert (record[0].filename, record[0].lineno) == (str(path), line)


@pytest.mark.parametrize(
    ("module", "hint"),
    [
        ("fake_missing_module_xyz", "names module 'fake_missing_module_xyz', which does not exist"),
        ("gem_core.no_such_submodule", "names module 'gem_core.no_such_submodule', which does not exist"),
    ],
    ids=["module-typo", "submodule-typo"],
)
def test_load_error_carries_hint(fakes: Fakes, module: str, hint: str) -> None:
    with pytest.raises(PluginLoadError) as err:
        build_registry(STRICT, entry_points=[fakes.ep("broken", module, "gem-broken", "9.9")])
    assert hint in err.value.hint and hint in str(err.value)
    assert "GEM_CORE_BLOCK_PLUGINS=broken" in err.value.hint
    assert (err.value.plugin, err.value.distribution, err.value.version) == ("broken", "gem-broken", "9.9")


def test_one_broken_plugin_leaves_the_others_in_the_discovery(two_plugins: list[md.EntryPoint], fakes: Fakes) -> None:
    eps = [*two_plugins, fakes.ep("broken", "fake_missing_module_xyz", "gem-broken", "9.9")]
    found = plugins.discover(PluginSettings(), entry_points=eps)
    assert "fake:Maze-v0" in found.registry.envs
    assert [p.name for p in found.broken] == ["broken"]
    assert [p.plugin for p in found.problems] == ["broken"]
    found.raise_if_broken()  # left out, not raised, by default
    strict = plugins.discover(STRICT, entry_points=eps)
    with pytest.raises(PluginLoadError):
        strict.raise_if_broken()


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
def test_owned_namespace_refuses_other_distributions(fakes: Fakes, intruder_name: str) -> None:
    found = plugins.discover(PluginSettings(), entry_points=owner_and_intruder(fakes, intruder_name))
    assert found.registry.spec("game:Sudoku-v0-easy").description == "real"
    assert found.registry.spec("mine:Own-v0").distribution == "gem-evil"  # its own ids are fine
    (problem,) = found.problems
    assert problem.plugin == intruder_name and isinstance(problem.error, NamespaceError)
    assert "in namespace 'game', which gem-games owns" in str(problem.error)
    assert "Fix for the authors of gem-evil" in str(problem.error)
    assert found.info("games").namespaces == ["game"]  # type: ignore[union-attr]
    assert (found.info("games").status, found.info(intruder_name).status) == ("loaded", "partly loaded")  # type: ignore[union-attr]
    with pytest.raises(NamespaceError):
        plugins.discover(STRICT, entry_points=owner_and_intruder(fakes, intruder_name)).raise_if_broken()


@pytest.mark.parametrize(
    ("owner_dist", "other_dist", "winner"),
    [
        ("gem-shared", "gem-evil", "gem-shared"),
        ("shared", "gem-evil", "shared"),
        ("gem-evil", "gem_Shared", "gem_Shared"),
        ("gem-one", "gem-two", None),
        ("gem-shared", "shared", None),
    ],
    ids=["gem-prefixed-owner", "bare-owner", "owner-sorts-last", "neither-named-for-it", "both-named-for-it"],
)
def test_two_distributions_claiming_one_namespace(
    fakes: Fakes, owner_dist: str, other_dist: str, winner: str | None
) -> None:
    """The distribution named for a namespace owns it whatever the plugin order; otherwise nobody does."""
    from gem_core.registry import PluginManifest

    for name in ("one", "two"):
        fakes.module(
            f"fake_{name}",
            plugin_manifest=lambda: PluginManifest(api_version=1, namespaces=("shared",)),
            register_envs=lambda n=name: [EnvSpec(id=f"shared:{n.title()}-v0", entry_point=REF)],
        )
    eps = [fakes.ep("one", "fake_one", owner_dist), fakes.ep("two", "fake_two", other_dist)]
    found = plugins.discover(PluginSettings(), entry_points=eps)
    assert found.registry.namespace_owners.get("shared") == winner
    ids = found.registry.env_ids(namespace="shared")
    if winner is None:  # contested: both are told, both keep their ids
        assert ids == ["shared:One-v0", "shared:Two-v0"]
        assert sorted(p.plugin for p in found.problems) == ["one", "two"]  # type: ignore[type-var]
        assert all("nobody owns it" in str(p.error) for p in found.problems)
    else:
        mine = "One" if winner == owner_dist else "Two"
        assert ids == [f"shared:{mine}-v0"]  # the other claimant's id there is refused, the owner's never
        assert all("belongs to " + winner in str(p.error) or "which " + winner + " owns" in str(p.error)
                   for p in found.problems)  # fmt: skip


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
        build_registry(STRICT, entry_points=[fakes.ep("manifest", "fake_manifest")])


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
    assert "is not a folder" in str(found.errors[0])


# ---------------------------------------------------------------- isolation: every breakage x every command

HEALTHY = "fake:Maze-v0"


def _healthy(fakes: Fakes) -> md.EntryPoint:
    """The author's package: owns namespace 'fake' (its distribution is named for it)."""
    from gem_core.registry import PluginManifest

    fakes.module(
        "fake_healthy",
        plugin_manifest=lambda: PluginManifest(api_version=1, namespaces=("fake",)),
        register_envs=lambda: [EnvSpec(id=HEALTHY, entry_point=REF, description="the author's env")],
    )
    return fakes.ep("good", "fake_healthy", "gem-fake", "1.0")


def _file_module(fakes: Fakes, tmp_path: Path, name: str, source: str) -> str:
    (tmp_path / f"{name}.py").write_text(source)
    fakes.monkeypatch.syspath_prepend(str(tmp_path))
    fakes.monkeypatch.delitem(sys.modules, name, raising=False)
    return name


def _hooks(fakes: Fakes, name: str, dist: str = "gem-bad", **hooks: Any) -> md.EntryPoint:
    fakes.module(f"fake_{name}", **hooks)
    return fakes.ep(name, f"fake_{name}", dist, "6.6")


def _raise(exc: Exception) -> Any:
    def hook() -> None:
        raise exc

    return hook


def _unmarked(fakes: Fakes) -> md.EntryPoint:
    import types

    module = types.ModuleType("fake_unmarked")
    module.register_envs = lambda: [EnvSpec(id="unmarked:X-v0", entry_point=REF)]  # type: ignore[attr-defined]
    fakes.monkeypatch.setitem(sys.modules, "fake_unmarked", module)
    return fakes.ep("unmarked", "fake_unmarked", "gem-unmarked")


def _manifest(api: int = 1, namespaces: tuple[str, ...] = ()) -> Any:
    from gem_core.registry import PluginManifest

    return lambda: PluginManifest(api_version=api, namespaces=namespaces)


#: Every way another package can be broken or hostile; each builds its entry point(s).
BREAKAGES: dict[str, Callable[[Fakes, Path], md.EntryPoint]] = {
    "entry-point-typo": lambda f, t: f.ep("typo", "fake_gooood_plugin_xyz", "gem-typo"),
    "entry-point-attr-typo": lambda f, t: f.ep("attr", f"{f.module('fake_attr').__name__}:nope", "gem-attr"),
    "missing-import": lambda f, t: f.ep(
        "missing", _file_module(f, t, "gem_iso_missing", "import a_dependency_nobody_installed_xyz\n"), "gem-missing"
    ),
    "import-raises": lambda f, t: f.ep(
        "raising", _file_module(f, t, "gem_iso_raising", "raise RuntimeError('half written')\n"), "gem-raising"
    ),
    "hook-raises": lambda f, t: _hooks(f, "boom", register_envs=_raise(RuntimeError("kaboom"))),
    "manifest-raises": lambda f, t: _hooks(f, "mboom", plugin_manifest=_raise(KeyError("x"))),
    "bad-spec": lambda f, t: _hooks(f, "badspec", register_envs=lambda: [{"id": "bad:X-v0", "entry_pont": REF}]),
    "wrong-type-spec": lambda f, t: _hooks(f, "wrongtype", register_envs=lambda: ["not a spec"]),
    "bad-manifest": lambda f, t: _hooks(f, "badman", plugin_manifest=lambda: "a string"),
    "api-version-2": lambda f, t: _hooks(
        f, "future", plugin_manifest=_manifest(2), register_envs=lambda: [EnvSpec(id="future:X-v0", entry_point=REF)]
    ),
    "misspelled-hook": lambda f, t: _hooks(
        f, "typohook", register_env=lambda: [EnvSpec(id="typohook:X-v0", entry_point=REF)]
    ),
    "unmarked-hook": lambda f, t: _unmarked(f),
    "duplicate-id": lambda f, t: _hooks(f, "aaa", register_envs=lambda: [EnvSpec(id=HEALTHY, entry_point=dict)]),
    "alias-in-owned-namespace": lambda f, t: _hooks(
        f, "alias", register_envs=lambda: [EnvAlias(id="fake:Maze-v1", target=HEALTHY)]
    ),
    "claims-owned-namespace": lambda f, t: _hooks(
        f,
        "aclaim",
        plugin_manifest=_manifest(1, ("fake",)),
        register_envs=lambda: [EnvSpec(id="fake:Taken-v0", entry_point=dict)],
    ),
    "same-plugin-name": lambda f, t: _hooks(
        f, "good", "gem-other", register_envs=lambda: [EnvSpec(id=HEALTHY, entry_point=dict)]
    ),
}


def _install(fakes: Fakes, tmp_path: Path, kinds: Iterable[str]) -> None:
    eps = [BREAKAGES[kind](fakes, tmp_path) for kind in kinds]
    fakes.install(*eps, _healthy(fakes))  # the healthy one last: the order must not matter


def _cli(*argv: str, stdin: str = "") -> tuple[int, str, str]:
    import io

    from gem_core.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stdin=io.StringIO(stdin), stderr=err)
    return code, out.getvalue(), err.getvalue()


def _run_command(command: str, server_url: str) -> None:
    """Run one command against the healthy env and assert it is unaffected."""
    from gem_core.cli import EXIT_OK, EXIT_PLUGIN_ERROR

    if command == "make":
        with pytest.warns(PluginWarning):  # the broken package is reported once, not raised
            env = gem_core.make(HEALTHY)
        assert env.reset(seed=0)[0].startswith("I picked")
        return
    argv, want, text = {
        "list": (["list"], EXIT_OK, HEALTHY),
        "list-json": (["list", "--json"], EXIT_OK, '"version": "1.0"'),
        "info": (["info", HEALTHY], EXIT_OK, "the author's env"),
        "check": (["check", HEALTHY], EXIT_OK, f"ok    {HEALTHY}"),
        "check-namespace": (["check", "--all", "-n", "fake"], EXIT_OK, f"ok    {HEALTHY}"),
        "check-all": (["check", "--all"], EXIT_PLUGIN_ERROR, f"ok    {HEALTHY}"),
        "plugins": (["plugins"], EXIT_PLUGIN_ERROR, "[gem-fake 1.0]  loaded"),
        "play": (["play", HEALTHY, "--seed", "0"], EXIT_OK, "bye. return this episode"),
        "eval": (["eval", "m", HEALTHY, "--base-url", server_url, "-n", "2", "--no-progress"], EXIT_OK, HEALTHY),
    }[command]
    code, out, err = _cli(*argv, stdin="/quit\n")
    assert (code, text in out) == (want, True), out + err
    assert "Traceback" not in out + err


COMMANDS = ["make", "list", "list-json", "info", "check", "check-namespace", "check-all", "plugins", "play", "eval"]


@pytest.fixture(scope="module")
def chat_server() -> Iterator[str]:
    from tests.eval.test_backends import ScriptedServer

    server = ScriptedServer([])
    yield server.url
    server.close()


@pytest.mark.parametrize("command", COMMANDS, ids=COMMANDS)
@pytest.mark.parametrize("kind", list(BREAKAGES), ids=list(BREAKAGES))
def test_a_broken_package_never_stops_a_healthy_one(
    fakes: Fakes, tmp_path: Path, chat_server: str, kind: str, command: str
) -> None:
    _install(fakes, tmp_path, [kind])
    _run_command(command, chat_server)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds=st.sets(st.sampled_from(sorted(BREAKAGES)), min_size=1))
def test_any_mix_of_broken_packages_leaves_the_healthy_one_alone(fakes: Fakes, tmp_path: Path, kinds: set[str]) -> None:
    _install(fakes, tmp_path, kinds)
    found = plugins.discover(PluginSettings())
    assert found.registry.spec(HEALTHY).distribution == "gem-fake"
    assert found.registry.namespace_owners["fake"] == "gem-fake"
    (healthy,) = [p for p in found.plugins if p.distribution == "gem-fake"]
    assert healthy.status == "loaded"
    assert found.problems and all(p.plugin != healthy.name for p in found.problems)
    for problem in found.problems:  # each names the distribution at fault and a fix
        message = str(problem.error)
        assert "gem-" in message and any(w in message for w in ("Fix", "pip install", "upgrade", "Upgrade", "typo"))


def test_strict_mode_turns_any_breakage_into_an_error(
    fakes: Fakes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gem_core.cli import EXIT_PLUGIN_ERROR

    monkeypatch.setenv("GEM_CORE_STRICT_PLUGINS", "1")
    _install(fakes, tmp_path, ["hook-raises"])
    with pytest.raises(PluginLoadError, match="kaboom"):
        gem_core.make(HEALTHY)
    code, _, err = _cli("list")
    assert code == EXIT_PLUGIN_ERROR and "kaboom" in err


def test_entry_point_typo_points_at_the_installed_declaration(fakes: Fakes, tmp_path: Path) -> None:
    """The warning for a module that does not exist points at entry_points.txt, not at '<unknown plugin>'."""
    info = tmp_path / "gem_typo-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gem-typo\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[gem_core]\ntypo = fake_gooood_plugin_xyz\n")
    (ep,) = md.PathDistribution(info).entry_points
    with pytest.warns(PluginWarning, match="gem-typo 1.0") as record:
        build_registry(PluginSettings(), entry_points=[ep])
    assert (record[0].filename, record[0].lineno) == (str(info / "entry_points.txt"), 2)


def test_misspelled_hook_is_named_with_the_right_one(fakes: Fakes) -> None:
    found = plugins.discover(PluginSettings(), entry_points=[BREAKAGES["misspelled-hook"](fakes, Path())])
    (problem,) = found.problems
    assert "'register_env', which gem does not define" in str(problem.error)
    assert "Fix: rename it to 'register_envs'" in str(problem.error)


def test_a_broken_plugin_adds_nothing(fakes: Fakes) -> None:
    """A plugin whose second hook raises takes back what its first hook registered."""
    ep = _hooks(
        fakes, "half", register_envs=lambda: [EnvSpec(id="half:X-v0", entry_point=REF)],
        register_tools=_raise(RuntimeError("tools broke")),
    )  # fmt: skip
    found = plugins.discover(PluginSettings(), entry_points=[ep])
    assert "half:X-v0" not in found.registry.envs
    assert found.info("half").status == "broken"  # type: ignore[union-attr]


@pytest.mark.parametrize("squatter_name", ["aaa", "zzz"], ids=["squatter-sorts-first", "squatter-sorts-last"])
def test_unclaimed_namespace_id_stays_with_the_package_named_for_it(fakes: Fakes, squatter_name: str) -> None:
    """No manifest anywhere: the id still goes to gem-ladder for namespace 'ladder', whatever the order."""
    ladder = _hooks(fakes, "ladder", "gem-ladder", register_envs=lambda: [EnvSpec(id="ladder:W-v0", entry_point=REF)])
    squat = _hooks(
        fakes, squatter_name, "gem-squat", register_envs=lambda: [EnvSpec(id="ladder:W-v0", entry_point=dict)]
    )
    found = plugins.discover(PluginSettings(), entry_points=[squat, ladder])
    assert found.registry.spec("ladder:W-v0").distribution == "gem-ladder"
    (problem,) = found.problems
    assert problem.plugin == squatter_name and "Fix for the authors of gem-squat" in str(problem.error)
    assert found.info("ladder").registered == {"envs": ["ladder:W-v0"]}  # type: ignore[union-attr]
    assert found.info(squatter_name).registered == {}  # type: ignore[union-attr]


def _manifest(*namespaces: str) -> Callable[[], Any]:
    from gem_core.registry import PluginManifest

    return lambda: PluginManifest(api_version=1, namespaces=namespaces)


#: Every way a declaration is refused for colliding with another plugin's: (plugin refused, what users block to use it).
COLLISIONS: dict[str, Callable[[Fakes], tuple[list[md.EntryPoint], str, str | None]]] = {
    "duplicate-id": lambda f: (
        [_hooks(f, "aaa", "gem-aaa", register_envs=lambda: [EnvSpec(id="free:X-v0", entry_point=REF)]),
         _hooks(f, "bbb", "gem-bbb", register_envs=lambda: [EnvSpec(id="free:X-v0", entry_point=dict)])],
        "bbb", "aaa",
    ),
    "id-kept-by-the-namespace-home": lambda f: (
        [_hooks(f, "aaa", "gem-squat", register_envs=lambda: [EnvSpec(id="ladder:W-v0", entry_point=dict)]),
         _hooks(f, "ladder", "gem-ladder", register_envs=lambda: [EnvSpec(id="ladder:W-v0", entry_point=REF)])],
        "aaa", "ladder",
    ),
    "id-in-an-owned-namespace": lambda f: (
        [_hooks(f, "owner", "gem-owner", plugin_manifest=_manifest("mine"), register_envs=lambda: []),
         _hooks(f, "intruder", "gem-intruder", register_envs=lambda: [EnvSpec(id="mine:X-v0", entry_point=REF)])],
        "intruder", "gem-owner",
    ),
    "id-in-gem-cores-namespace": lambda f: (
        [_hooks(f, "intruder", "gem-intruder", register_envs=lambda: [EnvSpec(id="core:X-v0", entry_point=REF)])],
        "intruder", None,
    ),
    "claim-of-a-homes-namespace": lambda f: (
        [_hooks(f, "ladder", "gem-ladder", plugin_manifest=_manifest("ladder")),
         _hooks(f, "other", "gem-other", plugin_manifest=_manifest("ladder"))],
        "other", "gem-ladder",
    ),
    "duplicate-tool": lambda f: (
        [_hooks(f, "aaa", "gem-aaa", register_tools=lambda: [ToolSpec(name="calc", entry_point=dict)]),
         _hooks(f, "bbb", "gem-bbb", register_tools=lambda: [ToolSpec(name="calc", entry_point=dict)])],
        "bbb", "aaa",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", COLLISIONS)
def test_a_refused_declaration_names_the_authors_fix_and_the_users(fakes: Fakes, case: str) -> None:
    eps, refused, kept = COLLISIONS[case](fakes)
    found = plugins.discover(PluginSettings(), entry_points=eps)
    (problem,) = found.problems_of([refused])
    message = str(problem.error)
    assert "Fix for the authors of gem-" in message and "of your own" in message
    assert f"to leave {refused!r} out and silence this, GEM_CORE_BLOCK_PLUGINS={refused}." in message
    if kept is None:  # gem-core's own: it cannot be blocked, so nothing is offered to swap
        assert "instead" not in message.split("Fix for users")[1]
        return
    assert f"to use {refused!r}'s instead, set GEM_CORE_BLOCK_PLUGINS={kept};" in message
    # and the user's fix works: blocking the kept one gives the refused plugin's declaration
    blocked = plugins.discover(PluginSettings(block=frozenset({kept})), entry_points=eps)
    assert not blocked.problems_of([refused])


def test_a_contested_namespace_names_both_fixes(fakes: Fakes) -> None:
    eps = [
        _hooks(fakes, "one", "gem-one", plugin_manifest=_manifest("shared")),
        _hooks(fakes, "two", "gem-two", plugin_manifest=_manifest("shared")),
    ]
    for problem in plugins.discover(PluginSettings(), entry_points=eps).problems:
        assert "Fix for the authors" in str(problem.error) and "GEM_CORE_BLOCK_PLUGINS=" in str(problem.error)


def test_a_runtime_duplicate_names_both_fixes() -> None:
    gem_core.register("rt:X-v0", REF)
    with pytest.raises(DuplicateIdError, match=r"Fix for the authors: use an id in a namespace of your own.*Fix for"):
        gem_core.register("rt:X-v0", REF)
