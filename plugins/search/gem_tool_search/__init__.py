"""gem-tool-search: the ``search`` tool for gem (BM25 over a JSONL corpus, or a Search-R1 server).

>>> import gem_core
>>> tool = gem_core.make_tool("search", top_k=2)  # BM25 over the shipped demo corpus

Names are imported lazily (PEP 562): gem_core imports ``gem_tool_search.plugin`` to list
tools, and that must not pull in numpy or aiohttp.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "BM25Index": "gem_tool_search.bm25",
    "default_cache_dir": "gem_tool_search.bm25",
    "tokenize": "gem_tool_search.bm25",
    "Document": "gem_tool_search.corpus",
    "SearchHit": "gem_tool_search.corpus",
    "demo_corpus_path": "gem_tool_search.corpus",
    "format_hits": "gem_tool_search.corpus",
    "iter_corpus": "gem_tool_search.corpus",
    "parse_document": "gem_tool_search.corpus",
    "BM25Retriever": "gem_tool_search.retrievers",
    "HttpRetriever": "gem_tool_search.retrievers",
    "Retriever": "gem_tool_search.retrievers",
    "SearchConfig": "gem_tool_search.tool",
    "SearchTool": "gem_tool_search.tool",
}

__all__ = [
    "BM25Index",
    "BM25Retriever",
    "Document",
    "HttpRetriever",
    "Retriever",
    "SearchConfig",
    "SearchHit",
    "SearchTool",
    "default_cache_dir",
    "demo_corpus_path",
    "format_hits",
    "iter_corpus",
    "parse_document",
    "tokenize",
]

if TYPE_CHECKING:
    from gem_tool_search.bm25 import BM25Index, default_cache_dir, tokenize
    from gem_tool_search.corpus import (
        Document,
        SearchHit,
        demo_corpus_path,
        format_hits,
        iter_corpus,
        parse_document,
    )
    from gem_tool_search.retrievers import BM25Retriever, HttpRetriever, Retriever
    from gem_tool_search.tool import SearchConfig, SearchTool


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gem_tool_search' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
