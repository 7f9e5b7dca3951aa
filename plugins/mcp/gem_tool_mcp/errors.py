"""gem-tool-mcp's errors (``gem_core.errors.MCPConnectionError`` still resolves here, for old imports)."""

from __future__ import annotations

from gem_core.errors import ToolError

__all__ = ["MCPConnectionError"]


class MCPConnectionError(ToolError, ConnectionError):
    """An MCP server could not be started or reached, or its session was lost."""
