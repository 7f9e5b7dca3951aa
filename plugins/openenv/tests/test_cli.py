"""``gem serve`` / ``gem export``: commands gem-openenv's plugin adds through gem's ``register_commands`` hook."""

from __future__ import annotations

import io
import sys

import pytest

from gem_core.cli import COMMANDS, EXIT_BAD_INPUT, EXIT_PLUGIN_ERROR, main, plugin_commands


def test_serve_and_export_come_from_the_plugin_not_the_core() -> None:
    assert {"serve", "export"}.isdisjoint(COMMANDS)  # gem's own commands
    commands = plugin_commands()
    assert {"serve", "export"} <= set(commands)
    from gem_core.plugins import get_registry

    assert {get_registry().commands.get(name).plugin for name in ("serve", "export")} == {"openenv"}  # type: ignore[union-attr]


@pytest.mark.parametrize("argv", [["serve", "core:NumberGuess-v0"], ["export", "openenv", "core:NumberGuess-v0"]])
def test_a_plugin_whose_command_module_is_missing_is_named(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    monkeypatch.setitem(sys.modules, "gem_openenv.cli", None)  # a broken install: the module cannot be imported
    out, err = io.StringIO(), io.StringIO()
    assert main(argv, stdout=out, stderr=err) == EXIT_PLUGIN_ERROR
    assert f"command {argv[0]!r} of plugin 'openenv' from gem-openenv" in err.getvalue()
    assert "Reinstall gem-openenv" in err.getvalue()


def test_without_the_plugin_serve_is_an_unknown_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from gem_core import plugins

    monkeypatch.setenv("GEM_CORE_BLOCK_PLUGINS", "gem-openenv")
    monkeypatch.setattr(plugins, "_state", None)  # a discovery of its own; the process's comes back after the test
    assert main(["serve", "core:NumberGuess-v0"], stdout=io.StringIO(), stderr=io.StringIO()) == EXIT_BAD_INPUT


def test_unknown_id_fails_before_a_port_is_bound() -> None:
    err = io.StringIO()
    assert main(["serve", "core:Nope-v0"], stdout=io.StringIO(), stderr=err) == EXIT_BAD_INPUT
    assert "no env registered under 'core:Nope-v0'" in err.getvalue()


def test_max_sessions_must_be_positive() -> None:
    err = io.StringIO()
    assert main(["serve", "core:NumberGuess-v0", "--max-sessions", "0"], stdout=io.StringIO(), stderr=err) == 2
    assert "--max-sessions" in err.getvalue()


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_step_timeout_must_be_positive(value: str) -> None:
    err = io.StringIO()
    argv = ["serve", "core:NumberGuess-v0", f"--step-timeout={value}"]
    assert main(argv, stdout=io.StringIO(), stderr=err) == 2
    assert "--step-timeout" in err.getvalue()


@pytest.mark.parametrize(
    "flag", ["--idle-timeout=-1", "--idle-timeout=nan", "--max-hung-steps=0"], ids=["negative", "nan", "zero"]
)
def test_idle_timeout_and_max_hung_steps_are_checked(flag: str) -> None:
    err = io.StringIO()
    assert main(["serve", "core:NumberGuess-v0", flag], stdout=io.StringIO(), stderr=err) == 2
    assert flag.split("=")[0] in err.getvalue()
