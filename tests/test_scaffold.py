"""gem new: the scaffold's files and refusals; installing and testing it for real is in test_plugin_venv.py."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gem_core.cli import EXIT_BAD_INPUT, EXIT_OK, main
from gem_core.errors import ConfigError
from gem_core.scaffold import scaffold

if TYPE_CHECKING:
    from tests.conftest import Fakes

EXPECTED = {
    "env": ["pyproject.toml", "README.md", ".github/workflows/ci.yml", "gem_maze/__init__.py",
            "gem_maze/plugin.py", "gem_maze/env.py", "tests/test_env.py"],
    "tool": ["pyproject.toml", "README.md", ".github/workflows/ci.yml", "gem_maze/__init__.py",
             "gem_maze/plugin.py", "gem_maze/tool.py", "tests/test_tool.py"],
}  # fmt: skip


@pytest.mark.parametrize("kind", ["env", "tool"])
def test_files_and_entry_point(tmp_path: Path, kind: str) -> None:
    written = scaffold(kind, "maze", tmp_path / "pkg")
    assert [str(p.relative_to(tmp_path / "pkg")) for p in written] == EXPECTED[kind]
    pyproject = (tmp_path / "pkg" / "pyproject.toml").read_text()
    assert 'name = "gem-maze"' in pyproject and 'maze = "gem_maze.plugin"' in pyproject
    assert "$" not in "".join(p.read_text() for p in written if p.suffix != ".yml")  # every placeholder filled


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [("MyGame", "'mygame'"), ("my-game", "'my_game'"), ("2048", "'mygame'"), ("", "'mygame'"), ("a b", "'a_b'")],
    ids=["upper-case", "dash", "digits-only", "empty", "space"],
)
def test_bad_names_are_refused_with_a_suggestion(tmp_path: Path, name: str, suggestion: str) -> None:
    with pytest.raises(ConfigError, match=suggestion):
        scaffold("env", name, tmp_path / "pkg")
    assert not (tmp_path / "pkg").exists()


def test_existing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="exists already"):
        scaffold("env", "maze", tmp_path)


def test_cli_new(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    assert main(["new", "env", "maze", "--dir", str(tmp_path / "x")], stdout=out) == EXIT_OK
    assert "gem check --all --namespace maze" in out.getvalue()
    assert main(["new", "env", "maze", "--dir", str(tmp_path / "x")], stdout=out) == EXIT_BAD_INPUT
    assert main(["new", "game", "maze"], stdout=out) == EXIT_BAD_INPUT
    assert "exists already" in capsys.readouterr().err


def test_scaffolded_env_passes_check_in_process(tmp_path: Path, fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    """The generated plugin, importable from its folder, registers ids that pass `gem check`."""
    scaffold("env", "maze", tmp_path / "pkg")
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    monkeypatch.delitem(sys.modules, "gem_maze", raising=False)
    fakes.install(fakes.ep("maze", "gem_maze.plugin", "gem-maze", "0.1.0"))
    out = io.StringIO()
    assert main(["check", "--all", "--namespace", "maze"], stdout=out) == EXIT_OK, out.getvalue()
    assert "2 ok, 0 failed" in out.getvalue()


@pytest.mark.parametrize(
    ("kind", "name", "reason"),
    [
        ("env", "core", "distribution would be 'gem-core', which is one of gem's own packages"),
        ("env", "games", "distribution would be 'gem-games'"),
        ("env", "game", "namespace 'game' belongs to gem-games"),
        ("tool", "tool_python", "distribution would be 'gem-tool-python'"),
        ("tool", "echo", "tool 'echo' is registered already"),
        ("env", "compat", "import package would be 'gem_compat'"),
        ("env", "rg", "'gem-rg'"),
    ],
    ids=["core", "games", "game-namespace", "python-tool", "echo-tool", "compat", "rg"],
)
def test_names_that_collide_are_refused(tmp_path: Path, kind: str, name: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        scaffold(kind, name, tmp_path / "pkg")
    assert not (tmp_path / "pkg").exists()


def test_an_installed_distribution_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata as md

    real = md.version

    def version(dist: str) -> str:
        return "3.1" if dist == "gem-ladder" else real(dist)

    monkeypatch.setattr(md, "version", version)
    with pytest.raises(ConfigError, match=r"'gem-ladder', which is installed \(gem-ladder 3.1\)"):
        scaffold("env", "ladder", tmp_path / "pkg")


@pytest.mark.parametrize(("name", "cls"), [("rot13", "Rot13Tool"), ("word_count", "WordCountTool")])
def test_tool_class_is_named_after_the_tool(tmp_path: Path, name: str, cls: str) -> None:
    scaffold("tool", name, tmp_path / "pkg")
    assert f"class {cls}(Tool):" in (tmp_path / "pkg" / f"gem_{name}" / "tool.py").read_text()
    assert f"tool:{cls}" in (tmp_path / "pkg" / f"gem_{name}" / "plugin.py").read_text()
