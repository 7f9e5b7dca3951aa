"""The tool protocol: what a tool declares, how calls are found in a response, and the tool wrapper."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gem_core.tools.base import Tool, ToolCall, ToolResult
from gem_core.tools.parsing import MalformedCall, ParsedResponse, parse_tool_calls

if TYPE_CHECKING:
    from gem_core.tools.wrapper import ToolEnvWrapper, ToolWrapperConfig

__all__ = [
    "MalformedCall",
    "ParsedResponse",
    "Tool",
    "ToolCall",
    "ToolEnvWrapper",
    "ToolResult",
    "ToolWrapperConfig",
    "parse_tool_calls",
]


def __getattr__(name: str) -> Any:
    # The wrapper pulls in the env core (numpy); tools themselves need only the protocol.
    if name in ("ToolEnvWrapper", "ToolWrapperConfig"):
        from gem_core.tools import wrapper

        return getattr(wrapper, name)
    raise AttributeError(f"module 'gem_core.tools' has no attribute {name!r}")
