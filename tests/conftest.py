from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gem_core import hookimpl, plugins

_SWITCHES = (
    "GEM_CORE_DISABLE_PLUGIN_AUTOLOAD",
    "GEM_CORE_PLUGINS",
    "GEM_CORE_BLOCK_PLUGINS",
    "GEM_CORE_SKIP_BROKEN_PLUGINS",
    "GEM_CORE_STRICT_PLUGINS",
    "GEM_CORE_TRACE_PLUGINS",
    "GEM_CORE_PLUGINS_DIR",
)


@pytest.fixture(autouse=True)
def _isolated_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts from a registry rebuilt from the environment it sets up."""
    for name in _SWITCHES:
        monkeypatch.delenv(name, raising=False)
    plugins.reset_registry()
    yield
    plugins.reset_registry()


class FakeDist(md.Distribution):
    """Distribution metadata for an entry point that was never installed."""

    def __init__(self, name: str, version: str) -> None:
        self._meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"

    def read_text(self, filename: str) -> str | None:
        return self._meta if filename in {"METADATA", "PKG-INFO"} else None

    def locate_file(self, path: Any) -> Any:
        return path


class Fakes:
    """Plugin modules and entry points without installing anything (the real-venv tests install)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch

    def ep(self, name: str, module: str, dist: str = "fake-dist", version: str = "1.2.3") -> md.EntryPoint:
        ep = md.EntryPoint(name=name, value=module, group="gem_core")
        return ep._for(FakeDist(dist, version))  # type: ignore[attr-defined, no-any-return]

    def module(self, name: str, **hooks: Callable[..., Any]) -> types.ModuleType:
        """A plugin module in ``sys.modules`` with the given hook implementations."""
        module = types.ModuleType(name)
        for hook_name, fn in hooks.items():
            setattr(module, hook_name, hookimpl(fn))
        self.monkeypatch.setitem(sys.modules, name, module)
        return module

    def install(self, *eps: md.EntryPoint) -> None:
        """Make process-wide discovery (``get_registry``, the CLI) see exactly these entry points."""
        self.monkeypatch.setattr(plugins.md, "entry_points", lambda group: list(eps))
        plugins.reset_registry()


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Fakes:
    return Fakes(monkeypatch)


@pytest.fixture
def run_bench() -> Callable[..., str]:
    """Run ``bench/<name>.py`` with arguments in a fresh interpreter; return what it printed (it must succeed)."""

    def run(name: str, *args: str) -> str:
        script = Path(__file__).resolve().parents[1] / "bench" / f"{name}.py"
        result = subprocess.run(
            [sys.executable, str(script), *args], capture_output=True, text=True, check=True, timeout=120
        )
        return result.stdout

    return run
