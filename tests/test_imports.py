"""Every gem_core module imports cleanly on its own with warnings as errors, and `import gem_core` stays light."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import gem_core

MODULES = sorted(m.name for m in pkgutil.walk_packages(gem_core.__path__, "gem_core."))


@pytest.mark.parametrize("module", MODULES, ids=MODULES)
def test_module_imports_alone(module: str) -> None:
    subprocess.run([sys.executable, "-W", "error", "-c", f"import {module}"], check=True, capture_output=True)


def test_import_gem_core_is_light() -> None:
    heavy = "('numpy', 'pydantic', 'pluggy', 'torch')"
    code = f"import sys, gem_core; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


def test_listing_does_not_import_numpy() -> None:
    code = "import sys, gem_core; gem_core.list_envs(); print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("name", gem_core.__all__, ids=gem_core.__all__)
def test_lazy_exports_resolve(name: str) -> None:
    assert getattr(gem_core, name) is not None


def test_unknown_attribute() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        gem_core.nope  # noqa: B018


def test_moved_errors_resolve_or_say_where_they_went(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every name moved out of gem_core.errors is the package's class, or an AttributeError naming the package."""
    import importlib.util
    import types

    from gem_core import errors

    for name, module in errors.MOVED.items():
        if importlib.util.find_spec(module.split(".")[0]) is not None:
            assert getattr(errors, name) is getattr(importlib.import_module(module), name)
            continue
        with pytest.raises(AttributeError, match=f"{name} moved to {module}.*pip install"):
            getattr(errors, name)
    fake = types.ModuleType("gem_tool_search.errors")
    fake.CorpusError = type("CorpusError", (errors.ToolError,), {})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gem_tool_search.errors", fake)
    assert errors.CorpusError is fake.CorpusError  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        errors.Nope  # noqa: B018
