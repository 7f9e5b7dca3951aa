"""The tool protocol: what a tool declares, how it is called, what it returns."""

from gem_core.tools.base import Tool, ToolCall, ToolResult

__all__ = ["Tool", "ToolCall", "ToolResult"]
