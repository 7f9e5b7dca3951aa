"""Registers the ``python`` tool with gem_core (imports nothing heavy)."""

from __future__ import annotations

from gem_core.hookspecs import hookimpl
from gem_core.registry import ToolSpec


@hookimpl
def register_tools() -> list[ToolSpec]:
    return [
        ToolSpec(
            name="python",
            entry_point="gem_tool_python.tool:PythonTool",
            description="Run Python code in an isolated sandbox and return what it prints.",
            tags=("code", "sandbox"),
        )
    ]
