"""GEM's ``SearchTool`` with GEM's arguments, on gem-tool-search."""

from __future__ import annotations

import os
from typing import Any

from gem._require import require

__all__ = ["SearchTool"]

_SearchTool: Any = require("gem_tool_search", "gem-tool-search", "gem.tools.search_tool").SearchTool


class SearchTool(_SearchTool):  # type: ignore[misc]
    """``SearchTool(num_workers=1, search_url=None, topk=3, timeout=5)``.

    With a ``search_url`` (or ``$SEARCH_URL``, as in GEM) it queries that retrieval server;
    without one it searches gem-tool-search's local BM25 corpus instead of failing.
    ``num_workers`` is accepted: concurrent queries are batched instead.
    """

    def __init__(
        self, num_workers: int = 1, search_url: str | None = None, topk: int = 3, timeout: float = 5, **config: Any
    ) -> None:
        del num_workers  # see the docstring
        url = search_url or os.environ.get("SEARCH_URL")
        backend = {"backend": "http", "url": url} if url else {"backend": "bm25"}
        super().__init__(**backend, top_k=topk, timeout_s=timeout, **config)
