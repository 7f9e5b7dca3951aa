"""GEM's ``MCPTool`` by its path, on gem-tool-mcp's toolset (one object, every tool of a server)."""

from __future__ import annotations

from typing import Any

from gem._require import require

__all__ = ["MCPTool"]

_MCPToolset: Any = require("gem_tool_mcp", "gem-tool-mcp", "gem.tools.mcp_tool").MCPToolset


class MCPTool(_MCPToolset):  # type: ignore[misc]
    """``MCPTool(config)``: ``config`` is a server URL (streamable HTTP) or a dict of gem-tool-mcp's fields.

    GEM's retry and handler arguments are not supported; its ``execution_timeout`` is
    ``call_timeout_s``. Give the object's ``.tools`` to a ``ToolEnvWrapper``.
    """

    def __init__(self, config: str | dict[str, Any], execution_timeout: float = 30.0, **fields: Any) -> None:
        given = {"url": config} if isinstance(config, str) else dict(config)
        super().__init__(**{"call_timeout_s": execution_timeout, **given, **fields})
