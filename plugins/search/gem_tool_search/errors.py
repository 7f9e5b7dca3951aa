"""gem-tool-search's errors (``gem_core.errors.CorpusError`` still resolves here, for old imports)."""

from __future__ import annotations

from gem_core.errors import ToolError

__all__ = ["CorpusError"]


class CorpusError(ToolError, ValueError):
    """A search corpus is missing or malformed; the message names the file and line."""
