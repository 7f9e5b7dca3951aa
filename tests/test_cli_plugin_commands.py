"""Plugins add ``gem`` commands through the ``register_commands`` hook; a broken one never takes the CLI down."""

from __future__ import annotations

import argparse
import io
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gem_core.cli import COMMANDS, EXIT_BAD_INPUT, EXIT_OK, EXIT_PLUGIN_ERROR, Streams, main, plugin_commands
from gem_core.errors import ConfigError
from gem_core.registry import CommandSpec

if TYPE_CHECKING:
    from tests.conftest import Fakes

ROOT = Path(__file__).resolve().parents[1]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stdin=io.StringIO(), stderr=err)
    return code, out.getvalue(), err.getvalue()


def hello_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default="world")
    parser.add_argument("--code", type=int, default=0)


def run_hello(args: argparse.Namespace, streams: Streams, greeting: str = "hello") -> int:
    if args.name == "bad":
        raise ConfigError("--name bad is refused")
    streams.out.write(f"{greeting} {args.name}\n")
    return int(args.code)


def _spec(name: str = "hello", **fields: Any) -> CommandSpec:
    defaults: dict[str, Any] = {
        "description": "say hello",
        "entry_point": f"{__name__}:run_hello",
        "arguments": f"{__name__}:hello_arguments",
    }
    return CommandSpec(name=name, **{**defaults, **fields})


def install(fakes: Fakes, *plugins: tuple[str, Any]) -> None:
    """One fake distribution per ``(name, register_commands)``: ``gem-<name>`` 1.0."""
    eps = []
    for name, hook in plugins:
        fakes.module(f"fake_cmd_{name}", register_commands=hook)
        eps.append(fakes.ep(name, f"fake_cmd_{name}", f"gem-{name}", "1.0"))
    fakes.install(*eps)


def test_a_plugins_command_runs_with_its_options(fakes: Fakes) -> None:
    install(fakes, ("greet", lambda: [_spec(), _spec("hi", kwargs={"greeting": "hi"})]))
    assert run("hello", "--name", "gem") == (EXIT_OK, "hello gem\n", "")
    assert run("hi") == (EXIT_OK, "hi world\n", "")
    assert run("hello", "--code", "7")[0] == 7  # the command's exit code is the CLI's
    code, _, err = run("hello", "--name", "bad")  # gem's errors keep their exit codes
    assert code == EXIT_BAD_INPUT and "--name bad is refused" in err
    code, out, _ = run("plugins")
    assert code == EXIT_OK and "commands: hello, hi" in out


def test_help_lists_plugins_commands_and_gems_own_stay_first(fakes: Fakes, capsys: pytest.CaptureFixture[str]) -> None:
    install(fakes, ("greet", lambda: [_spec()]))
    assert main(["--help"]) == EXIT_OK
    listed = re.findall(r"^    (\S+)", capsys.readouterr().out, flags=re.MULTILINE)
    assert listed == [*COMMANDS, "hello"]


def test_gems_own_commands_do_not_look_plugins_commands_up(fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    install(fakes, ("greet", lambda: [_spec()]))

    def refuse() -> None:
        raise AssertionError("plugin_commands() was called for one of gem's own commands")

    monkeypatch.setattr("gem_core.cli.plugin_commands", refuse)
    assert run("list", "--namespace", "core")[0] == EXIT_OK


@pytest.mark.parametrize(
    ("hook", "argv", "code", "text"),
    [
        (lambda: 1 / 0, ["hello"], EXIT_BAD_INPUT, "plugin 'bad' from gem-bad 1.0: hook register_commands failed"),
        (lambda: [{"name": "Hello!", "description": "x", "entry_point": "m:f"}], ["hello"], EXIT_BAD_INPUT, "Hello!"),
        (lambda: [_spec(entry_point="gem_no_such_module_xyz:run")], ["hello"], EXIT_PLUGIN_ERROR, "gem_no_such_module"),
        (lambda: [_spec(arguments="gem_no_such_module_xyz:args")], ["hello"], EXIT_PLUGIN_ERROR, "its options cannot"),
        (lambda: [_spec(arguments=lambda p: 1 / 0)], ["hello"], EXIT_PLUGIN_ERROR, "adding its options raised"),
        (lambda: [_spec(entry_point=lambda a, s: 1 / 0)], ["hello"], EXIT_PLUGIN_ERROR, "failed: ZeroDivisionError"),
        (lambda: [_spec(entry_point=lambda a, s: None)], ["hello"], EXIT_PLUGIN_ERROR, "returned None, not an exit"),
    ],
    ids=["hook-raises", "bad-declaration", "run-not-importable", "options-not-importable", "options-raise",
         "run-raises", "run-returns-none"],
)  # fmt: skip
def test_a_broken_plugin_command_is_a_typed_error_naming_the_plugin(
    fakes: Fakes, hook: Any, argv: list[str], code: int, text: str
) -> None:
    install(fakes, ("bad", hook), ("greet", lambda: [_spec("other")]))
    got, out, err = run(*argv)
    assert got == code, out + err
    assert text in err and "'bad'" in err
    assert "Traceback" not in out + err
    # every other command keeps working
    assert run("other") == (EXIT_OK, "hello world\n", "")
    assert run("list", "--namespace", "core")[0] == EXIT_OK
    assert run("--help")[0] == EXIT_OK


def test_a_plugin_cannot_take_the_name_of_one_of_gems_commands(fakes: Fakes) -> None:
    install(fakes, ("squat", lambda: [_spec("list"), _spec("check")]))
    code, out, _ = run("list", "--namespace", "core")
    assert code == EXIT_OK and "core:NumberGuess-v0" in out  # gem's own
    assert set(plugin_commands()) == set()
    code, out, _ = run("plugins")
    assert code == EXIT_PLUGIN_ERROR
    assert "command 'list' is declared by gem_core.builtin (gem-core) and again by plugin 'squat'" in out
    assert "give the command a name of your own" in out and "GEM_CORE_BLOCK_PLUGINS=squat" in out


def test_two_plugins_with_one_command_keep_the_first_and_name_both(fakes: Fakes) -> None:
    install(fakes, ("aaa", lambda: [_spec()]), ("bbb", lambda: [_spec(kwargs={"greeting": "bye"})]))
    assert run("hello") == (EXIT_OK, "hello world\n", "")
    _, out, _ = run("plugins")
    assert "command 'hello' is declared by aaa (gem-aaa) and again by plugin 'bbb'" in out
    assert "GEM_CORE_BLOCK_PLUGINS=aaa" in out  # to use bbb's instead


def test_an_unknown_command_names_the_broken_plugin_that_may_declare_it(
    fakes: Fakes, capsys: pytest.CaptureFixture[str]
) -> None:
    install(fakes, ("bad", lambda: 1 / 0))
    code, _, err = run("serve", "x")
    assert code == EXIT_BAD_INPUT
    assert "plugin 'bad' from gem-bad 1.0: hook register_commands failed: ZeroDivisionError" in err
    assert "invalid choice: 'serve'" in capsys.readouterr().err  # argparse's own line


def test_strict_mode_fails_a_plugin_command_lookup_on_any_plugin_problem(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(fakes, ("bad", lambda: 1 / 0), ("greet", lambda: [_spec()]))
    monkeypatch.setenv("GEM_CORE_STRICT_PLUGINS", "1")
    code, _, err = run("hello")
    assert code == EXIT_PLUGIN_ERROR and "hook register_commands failed" in err


def test_gem_core_imports_no_plugin() -> None:
    """The core's source imports no plugin package: plugins reach the CLI only through the hook."""
    plugin = r"gem_(?!core\b)\w+"
    imports = re.compile(rf"^\s*(from|import)\s+{plugin}|import_module\(\s*[\"']{plugin}", flags=re.MULTILINE)
    for path in (ROOT / "gem_core").rglob("*.py"):
        assert not imports.search(path.read_text()), path
