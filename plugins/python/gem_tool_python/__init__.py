"""gem tool ``python``: model-written Python run in an isolated sandbox with a warm worker pool.

Names are imported on first use, so the plugin module (imported by ``gem list``) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["PythonTool", "SandboxConfig", "SandboxPool", "SandboxResult", "detect_isolation"]

_HOME = {
    "PythonTool": "gem_tool_python.tool",
    "SandboxConfig": "gem_tool_python.sandbox",
    "SandboxPool": "gem_tool_python.sandbox",
    "SandboxResult": "gem_tool_python.sandbox",
    "detect_isolation": "gem_tool_python.sandbox",
}

if TYPE_CHECKING:
    from gem_tool_python.sandbox import SandboxConfig, SandboxPool, SandboxResult, detect_isolation
    from gem_tool_python.tool import PythonTool


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'gem_tool_python' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value
    return value
