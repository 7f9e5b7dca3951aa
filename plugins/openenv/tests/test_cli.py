"""``gem serve`` / ``gem export`` in gem_core's CLI: lazily loaded, with an install hint when gem-openenv is missing."""

from __future__ import annotations

import io
import sys

import pytest

from gem_core.cli import main


@pytest.mark.parametrize("argv", [["serve", "core:NumberGuess-v0"], ["export", "openenv", "core:NumberGuess-v0"]])
def test_missing_gem_openenv_says_what_to_install(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    monkeypatch.setitem(sys.modules, "gem_openenv", None)  # as if not installed
    out, err = io.StringIO(), io.StringIO()
    assert main(argv, stdout=out, stderr=err) == 2
    assert "pip install gem-openenv" in err.getvalue()


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


def test_serve_and_export_are_commands() -> None:
    from gem_core.cli import COMMANDS

    assert {"serve", "export"} <= set(COMMANDS)
