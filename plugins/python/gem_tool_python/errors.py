"""gem-tool-python's warnings (``gem_core.errors.SandboxIsolationWarning`` still resolves here, for old imports)."""

from __future__ import annotations

from gem_core.errors import GemCoreWarning

__all__ = ["SandboxIsolationWarning"]


class SandboxIsolationWarning(GemCoreWarning):
    """The Python sandbox fell back to weaker isolation than Linux namespaces (said once per level)."""
