from __future__ import annotations

from collections.abc import Iterator

import pytest

from gem_core import plugins

_SWITCHES = (
    "GEM_CORE_DISABLE_PLUGIN_AUTOLOAD",
    "GEM_CORE_PLUGINS",
    "GEM_CORE_BLOCK_PLUGINS",
    "GEM_CORE_SKIP_BROKEN_PLUGINS",
    "GEM_CORE_TRACE_PLUGINS",
)


@pytest.fixture(autouse=True)
def _isolated_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts from a registry rebuilt from the environment it sets up."""
    for name in _SWITCHES:
        monkeypatch.delenv(name, raising=False)
    plugins.reset_registry()
    yield
    plugins.reset_registry()
