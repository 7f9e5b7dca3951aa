"""Search backends behind one interface: local BM25 and a Search-R1 style HTTP server."""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from gem_core.errors import ToolError
from gem_tool_search.bm25 import BM25Index, default_cache_dir
from gem_tool_search.corpus import SearchHit, parse_document

__all__ = ["BM25Retriever", "HttpRetriever", "Retriever"]

#: Loaded indexes by (corpus, k1, b, cache dir), alive while some retriever uses them.
_SHARED_INDEXES: weakref.WeakValueDictionary[tuple[str, float, float, str], BM25Index] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


@runtime_checkable
class Retriever(Protocol):
    """What :class:`~gem_tool_search.SearchTool` needs from a backend.

    Both methods run on the tool's own event loop (one per tool), so a backend may keep
    loop-bound state such as an HTTP connection pool.
    """

    async def search(self, queries: Sequence[str], top_k: int) -> list[list[SearchHit]]:
        """The best ``top_k`` hits for each query, in query order. Raise on failure."""
        ...

    async def aclose(self) -> None:
        """Release connections; idempotent."""
        ...


class BM25Retriever:
    """BM25 over a local JSONL corpus; the index is built (or loaded from cache) on first search.

    Args:
        corpus: JSONL file with ``id``, ``title``, ``text`` per line.
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation.
        cache_dir: Where indexes are cached (default :func:`~gem_tool_search.bm25.default_cache_dir`).
    """

    def __init__(self, corpus: Path, *, k1: float = 0.9, b: float = 0.4, cache_dir: Path | None = None) -> None:
        self.corpus = Path(corpus)
        self.k1 = k1
        self.b = b
        self.cache_dir = cache_dir
        self._index: BM25Index | None = None

    def index(self) -> BM25Index:
        """The index, (re)built when missing or when the corpus file changed.

        Retrievers of the same corpus and parameters in one process share one index, so
        64 envs each building ``make_tool("search")`` load it once.
        """
        if self._index is None or self._index.is_stale():
            cache_dir = Path(self.cache_dir) if self.cache_dir is not None else default_cache_dir()
            key = (str(self.corpus.resolve()), self.k1, self.b, str(cache_dir))
            with _SHARED_LOCK:
                index = _SHARED_INDEXES.get(key)
                if index is None or index.is_stale():
                    index = BM25Index.load_or_build(self.corpus, k1=self.k1, b=self.b, cache_dir=cache_dir)
                    _SHARED_INDEXES[key] = index
            self._index = index
        return self._index

    async def search(self, queries: Sequence[str], top_k: int) -> list[list[SearchHit]]:
        # Scoring runs inline on the tool's background loop: requests arriving meanwhile
        # queue up and form the next batch.
        index = self.index()
        results = []
        for query in queries:
            ranked = index.search(query, top_k)
            docs = index.documents([i for i, _ in ranked])
            results.append([SearchHit(doc, score) for doc, (_, score) in zip(docs, ranked, strict=True)])
        return results

    async def aclose(self) -> None:
        self._index = None


class HttpRetriever:
    """Client of a retrieval server speaking Search-R1's ``POST /retrieve`` protocol.

    Request ``{"queries": [...], "topk": k, "return_scores": true}``; response
    ``{"result": [[{"document": {"id", "contents"}, "score": s}, ...], ...]}`` with one list
    per query. Documents may also carry ``title``/``text`` instead of ``contents``.
    One :class:`aiohttp.ClientSession` is kept open, so connections are reused; a request
    that fails, times out or is cancelled closes it (the next request opens a new one), so
    a late reply never reaches a later request.

    Args:
        url: Full endpoint, e.g. ``http://127.0.0.1:8000/retrieve``.
        timeout_s: Limit for one request, connection included.
        headers: Extra HTTP headers (an API key, for instance).
    """

    def __init__(self, url: str, *, timeout_s: float = 10.0, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})
        self._session: Any = None

    async def search(self, queries: Sequence[str], top_k: int) -> list[list[SearchHit]]:
        import aiohttp  # imported here so listing tools never imports aiohttp

        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s), headers=self.headers
            )
        payload = {"queries": list(queries), "topk": top_k, "return_scores": True}
        try:
            async with self._session.post(self.url, json=payload) as response:
                body = await response.text()
                if response.status != 200:
                    raise ToolError(f"search server {self.url} answered HTTP {response.status}: {body[:300]}")
        except aiohttp.ClientError as exc:
            await self._reset()
            raise ToolError(f"search server {self.url} unreachable: {type(exc).__name__}: {exc}") from exc
        except asyncio.TimeoutError:
            await self._reset()
            raise ToolError(
                f"search server {self.url} timed out after {self.timeout_s} s; its connections were dropped"
            ) from None
        except asyncio.CancelledError:
            await self._reset()
            raise
        return self._parse(body, len(queries))

    async def _reset(self) -> None:
        """Drop every connection: a request given up may still get its reply, which no later request may read.

        (aiohttp already closes a connection whose response was not read to its end; this also
        leaves no connection of the failed pool for the next request.)
        """
        session, self._session = self._session, None
        if session is not None:
            await asyncio.shield(session.close())

    def _parse(self, body: str, n_queries: int) -> list[list[SearchHit]]:
        try:
            result = json.loads(body)["result"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ToolError(f"search server {self.url} sent no JSON 'result' field: {body[:300]!r}") from exc
        if not isinstance(result, list) or len(result) != n_queries:
            raise ToolError(f"search server {self.url} returned {len(result)} result lists for {n_queries} queries")
        hits: list[list[SearchHit]] = []
        for per_query in result:
            row = []
            for item in per_query:
                # With return_scores the server wraps each document; without, it sends the document itself.
                doc_record = item.get("document", item) if isinstance(item, dict) else item
                document = parse_document(doc_record, f"search server {self.url} response")
                score = float(item.get("score", 0.0)) if isinstance(item, dict) else 0.0
                row.append(SearchHit(document, score))
            hits.append(row)
        return hits

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
