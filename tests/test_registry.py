from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gem_core.errors import (
    ConfigError,
    DuplicateIdError,
    EntryPointError,
    EnvNotFound,
    InvalidIdError,
    RegistrationError,
    ToolNotFound,
    WrapperNotFound,
)
from gem_core.registry import (
    EnvAlias,
    EnvSpec,
    Registry,
    ToolSpec,
    WrapperSpec,
    load_entry_point,
    parse_env_id,
)
from gem_core.testing import GenericTestEnv, NumberGuessEnv

REF = "gem_core.testing:NumberGuessEnv"


@pytest.fixture
def registry() -> Registry:
    reg = Registry()
    reg.register("core:NumberGuess-v0", REF, description="ref", tags=("multi-turn",))
    reg.register("core:NumberGuess-v0-hard", REF, kwargs={"high": 100}, tags=("multi-turn", "hard"))
    reg.register("other:Echo-v1", GenericTestEnv)
    return reg


@pytest.mark.parametrize(
    ("env_id", "parts"),
    [
        ("game:Sudoku-v0-easy", ("game", "Sudoku", "0", "easy")),
        ("game:Game2048-v0-extreme-hard", ("game", "Game2048", "0", "extreme-hard")),
        ("math:GSM8K", ("math", "GSM8K", None, None)),
        ("math:Math8K-3to5", ("math", "Math8K", None, "3to5")),
        ("rg:leg_counting", ("rg", "leg_counting", None, None)),
        ("logic:RuleTaker-d0", ("logic", "RuleTaker", None, "d0")),
    ],
    ids=["variant", "hyphenated-variant", "unversioned", "suffix", "underscore", "logic"],
)
def test_parse_env_id(env_id: str, parts: tuple[Any, ...]) -> None:
    p = parse_env_id(env_id)
    assert (p["namespace"], p["name"], p["version"], p["variant"]) == parts


@pytest.mark.parametrize(
    "bad", ["Sudoku-v0", "Game:Sudoku", "game:", ":Sudoku", "game:Su doku", "game:Sudoku-"], ids=str
)
def test_invalid_ids_are_rejected(bad: str) -> None:
    with pytest.raises(InvalidIdError, match="namespace:Name"):
        parse_env_id(bad)
    with pytest.raises(ConfigError, match="id"):
        Registry().register(bad, REF)


def test_make_merges_kwargs_and_sets_spec(registry: Registry) -> None:
    env = registry.make("core:NumberGuess-v0-hard", max_turns=3)
    assert isinstance(env, NumberGuessEnv)
    assert (env.high, env.max_turns) == (100, 3)
    assert env.spec is not None and env.spec.id == "core:NumberGuess-v0-hard"


def test_callable_entry_point(registry: Registry) -> None:
    assert isinstance(registry.make("other:Echo-v1"), GenericTestEnv)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"high": "many"}, "high"), ({"max_turns": 0}, "max_turns"), ({"colour": "red"}, "colour")],
    ids=["wrong-type", "out-of-range", "unknown-field"],
)
def test_bad_config_names_the_field(registry: Registry, kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"core:NumberGuess-v0(.|\n)*{field}"):
        registry.make("core:NumberGuess-v0", **kwargs)


def test_bad_kwargs_without_config_model(registry: Registry) -> None:
    with pytest.raises(ConfigError, match="other:Echo-v1.*unexpected keyword"):
        registry.make("other:Echo-v1", nope=1)


def test_not_found_suggests_close_ids_and_plugins(registry: Registry) -> None:
    with pytest.raises(EnvNotFound) as err:
        registry.make("core:NumberGues-v0")
    msg = str(err.value)
    assert "Did you mean 'core:NumberGuess-v0'" in msg
    assert "gem list" in msg


def test_not_found_matches_wrong_case(registry: Registry) -> None:
    with pytest.raises(EnvNotFound, match="Did you mean 'core:NumberGuess-v0'"):
        registry.make("core:numberguess-v0")


def test_not_found_lists_installed_plugins() -> None:
    reg = Registry()
    reg.add(EnvSpec(id="a:B-v0", entry_point=REF, distribution="gem-games", plugin="games"))
    with pytest.raises(EnvNotFound, match="Installed env plugins: gem-games"):
        reg.make("zzz:Nothing")


def test_duplicate_id_names_both_owners() -> None:
    reg = Registry()
    reg.add(EnvSpec(id="a:B-v0", entry_point=REF, distribution="dist-one", plugin="one"))
    with pytest.raises(DuplicateIdError, match=r"one \(dist-one\).*two \(dist-two\)"):
        reg.add(EnvSpec(id="a:B-v0", entry_point=REF, distribution="dist-two", plugin="two"))
    reg.add(EnvSpec(id="a:B-v0", entry_point=REF, kwargs={"high": 9}), override=True)
    assert reg.spec("a:B-v0").kwargs == {"high": 9}


def test_deprecated_alias_warns_and_resolves(registry: Registry) -> None:
    registry.add(EnvAlias(id="core:Guess-v0", target="core:NumberGuess-v0", deprecated=True, message="Renamed."))
    with pytest.warns(DeprecationWarning, match="'core:Guess-v0' is deprecated; use 'core:NumberGuess-v0'.*Renamed"):
        env = registry.make("core:Guess-v0")
    assert isinstance(env, NumberGuessEnv)
    assert registry.spec("core:Guess-v0").id == "core:NumberGuess-v0"
    assert "core:Guess-v0" not in registry.env_ids()


def test_plain_alias_does_not_warn(registry: Registry) -> None:
    registry.add(EnvAlias(id="core:Guess-v0", target="core:NumberGuess-v0"))
    registry.make("core:Guess-v0")  # warnings are errors in this suite


def test_alias_and_id_cannot_collide(registry: Registry) -> None:
    with pytest.raises(RegistrationError, match="collides"):
        registry.add(EnvAlias(id="core:NumberGuess-v0", target="other:Echo-v1"))
    registry.add(EnvAlias(id="core:X-v0", target="other:Echo-v1"))
    with pytest.raises(DuplicateIdError, match="alias"):
        registry.register("core:X-v0", REF)


def test_dangling_alias_says_so() -> None:
    reg = Registry()
    reg.add(EnvAlias(id="a:Old-v0", target="a:New-v0"))
    with pytest.raises(EnvNotFound, match="points at 'a:New-v0', which is not registered"):
        reg.make("a:Old-v0")


def test_filters(registry: Registry) -> None:
    assert registry.env_ids(namespace="other") == ["other:Echo-v1"]
    assert registry.env_ids(tag="hard") == ["core:NumberGuess-v0-hard"]
    assert registry.env_ids(namespace="core", tag="multi-turn") == ["core:NumberGuess-v0", "core:NumberGuess-v0-hard"]


def test_listing_does_not_import_entry_points() -> None:
    import sys

    reg = Registry()
    reg.register("lazy:Never-v0", "gem_core_tests_never_imported.module:Env")
    assert reg.env_ids() == ["lazy:Never-v0"]
    assert "gem_core_tests_never_imported" not in sys.modules
    with pytest.raises(EntryPointError, match="cannot import module 'gem_core_tests_never_imported.module'"):
        reg.make("lazy:Never-v0")


@pytest.mark.parametrize(
    ("entry_point", "message"),
    [
        ("gem_core.testing:Missing", "has no attribute 'Missing'"),
        ("no_such_module_xyz:Thing", "cannot import module"),
    ],
    ids=["missing-attr", "missing-module"],
)
def test_load_entry_point_errors(entry_point: str, message: str) -> None:
    with pytest.raises(EntryPointError, match=message):
        load_entry_point(entry_point)


@pytest.mark.parametrize("entry_point", ["no-colon", "a:b:c", "1mod:X", ""], ids=repr)
def test_malformed_entry_point_is_a_config_error(entry_point: str) -> None:
    with pytest.raises(ConfigError, match="entry_point"):
        Registry().register("a:B-v0", entry_point)


def _double(env: Any, factor: int = 2) -> Any:
    env.factor = factor
    return env


def test_wrappers_by_name_tuple_and_callable(registry: Registry) -> None:
    registry.add(WrapperSpec(name="double", entry_point=_double, kwargs={"factor": 3}))
    assert registry.make("core:NumberGuess-v0", wrappers=["double"]).factor == 3
    assert registry.make("core:NumberGuess-v0", wrappers=[("double", {"factor": 5})]).factor == 5
    assert registry.make("core:NumberGuess-v0", wrappers=[lambda e: _double(e, 7)]).factor == 7
    registry.register("core:Wrapped-v0", REF, wrappers=("double",))
    assert registry.make("core:Wrapped-v0").factor == 3


def test_unknown_wrapper(registry: Registry) -> None:
    with pytest.raises(WrapperNotFound, match="'nope'"):
        registry.make("core:NumberGuess-v0", wrappers=["nope"])


def test_tools(registry: Registry) -> None:
    registry.add(ToolSpec(name="echo", entry_point=dict, kwargs={"a": 1}))
    assert registry.make_tool("echo", b=2) == {"a": 1, "b": 2}
    with pytest.raises(ToolNotFound, match="Did you mean 'echo'"):
        registry.make_tool("ecco")


def test_unknown_declaration_type() -> None:
    with pytest.raises(RegistrationError, match="cannot register dict"):
        Registry().add({"id": "a:B"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("module_source", "message"),
    [
        (None, r"from pkgplug \(gem-pkg\).*Reinstall gem-pkg"),
        ("import a_dependency_nobody_installed_xyz\n", "imports 'a_dependency_nobody_installed_xyz'.*pip install"),
    ],
    ids=["env-module-missing", "dependency-missing"],
)
def test_make_names_the_distribution_and_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module_source: str | None, message: str
) -> None:
    if module_source is not None:
        (tmp_path / "gem_pkg_env_xyz.py").write_text(module_source)
        monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry()
    reg.add(EnvSpec(id="pkg:Env-v0", entry_point="gem_pkg_env_xyz:Env", distribution="gem-pkg", plugin="pkgplug"))
    with pytest.raises(EntryPointError, match=message):
        reg.make("pkg:Env-v0")


def test_deprecation_points_at_the_callers_line() -> None:
    """Through gem_core.make the warning is attributed to the calling code (shown outside pytest too)."""
    import subprocess
    import sys

    code = (
        "import gem_core\n"
        "from gem_core.registry import EnvAlias\n"
        "from gem_core.plugins import get_registry\n"
        "get_registry().add(EnvAlias(id='core:Old-v0', target='core:NumberGuess-v0', deprecated=True), override=True)\n"
        "gem_core.make('core:Old-v0')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "<string>:5: DeprecationWarning: env id 'core:Old-v0' is deprecated" in proc.stderr
