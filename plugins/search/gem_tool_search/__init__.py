"""gem-tool-search: the ``search`` tool for gem (BM25 over a JSONL corpus, or a Search-R1 server).

>>> import gem_core
>>> tool = gem_core.make_tool("search", top_k=2)  # BM25 over the shipped demo corpus
"""

from gem_tool_search.bm25 import BM25Index, default_cache_dir, tokenize
from gem_tool_search.corpus import Document, SearchHit, demo_corpus_path, format_hits, iter_corpus, parse_document
from gem_tool_search.retrievers import BM25Retriever, HttpRetriever, Retriever
from gem_tool_search.tool import SearchConfig, SearchTool

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
