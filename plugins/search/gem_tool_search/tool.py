"""The ``search`` tool: batched, async retrieval over BM25 or a Search-R1 HTTP server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gem_core.errors import ConfigError, ToolError
from gem_core.loop import LoopThread
from gem_core.registry import format_config_error
from gem_core.tools.base import Tool, ToolResult
from gem_core.tools.safety import clean_text
from gem_tool_search.corpus import SearchHit, demo_corpus_path, format_hits
from gem_tool_search.retrievers import BM25Retriever, HttpRetriever, Retriever

__all__ = ["SearchConfig", "SearchTool"]


class SearchConfig(BaseModel):
    """Configuration of :class:`SearchTool` (validated by ``make_tool("search", ...)``).

    Attributes:
        backend: ``"bm25"`` (local corpus) or ``"http"`` (a retrieval server at ``url``).
        corpus: JSONL corpus for BM25; default: the demo corpus shipped with the package.
        url: Retrieval endpoint for ``http``, e.g. ``http://127.0.0.1:8000/retrieve``.
        headers: Extra HTTP headers for ``http``.
        top_k: Passages returned per query unless the call asks for another number.
        max_top_k: Upper bound on a call's own ``top_k``.
        timeout_s: Limit for one call, waiting for its batch included; past it the model
            gets a timeout error.
        max_batch_size: Most queries sent to the backend at once.
        batch_wait_s: How long the first query of a batch waits for others to join. With 0,
            the batch holds the calls that arrived in the same loop iteration, plus those that
            queued up while the backend was busy: no added latency, batches grow with load.
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation.
        cache_dir: Where BM25 indexes are cached (default ``$XDG_CACHE_HOME/gem/search``).
        max_query_chars: Longer queries are cut to this many characters.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["bm25", "http"] = "bm25"
    corpus: Path | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    top_k: int = Field(3, ge=1)
    max_top_k: int = Field(20, ge=1)
    timeout_s: float = Field(10.0, gt=0)
    max_batch_size: int = Field(64, ge=1)
    batch_wait_s: float = Field(0.0, ge=0)
    k1: float = Field(0.9, gt=0)
    b: float = Field(0.4, ge=0, le=1)
    cache_dir: Path | None = None
    max_query_chars: int = Field(2000, ge=1)

    @model_validator(mode="after")
    def _check_backend(self) -> SearchConfig:
        if self.backend == "http":
            if not self.url:
                raise ValueError("backend='http' needs url='http://host:port/retrieve'")
            if not self.url.startswith(("http://", "https://")):
                raise ValueError(f"url must start with http:// or https://, got {self.url!r}")
            if self.corpus is not None:
                raise ValueError("corpus is for backend='bm25'; the http backend searches the server's corpus")
        elif self.url is not None:
            raise ValueError("url is for backend='http'; set backend='http' or drop url")
        if self.top_k > self.max_top_k:
            raise ValueError(f"top_k={self.top_k} exceeds max_top_k={self.max_top_k}")
        return self


class _Batcher:
    """Collects concurrent queries on the tool's loop and sends them to the backend together."""

    def __init__(self, retriever: Retriever, max_batch_size: int, wait_s: float) -> None:
        self.retriever = retriever
        self.max_batch_size = max_batch_size
        self.wait_s = wait_s
        self._pending: list[tuple[str, int, asyncio.Future[list[SearchHit]]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.batches = 0

    async def search(self, query: str, top_k: int) -> list[SearchHit]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[SearchHit]] = loop.create_future()
        self._pending.append((query, top_k, future))
        if len(self._pending) >= self.max_batch_size:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self.wait_s, self._flush)
        return await future

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending = self._pending, []
        if batch:
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[tuple[str, int, asyncio.Future[list[SearchHit]]]]) -> None:
        live = [item for item in batch if not item[2].done()]  # callers that timed out are gone
        if not live:
            return
        self.batches += 1
        request = asyncio.current_task()
        settled = False

        def caller_gone(_: asyncio.Future[list[SearchHit]]) -> None:
            # Every caller timed out or was cancelled: stop the request (the backend drops its channel)
            # rather than read a reply nobody waits for.
            if not settled and request is not None and all(future.done() for _, _, future in live):
                request.cancel()

        for _, _, future in live:
            future.add_done_callback(caller_gone)
        try:
            # One request at the largest top_k; each caller gets its own prefix of the ranking.
            results = await self.retriever.search([q for q, _, _ in live], max(k for _, k, _ in live))
            settled = True
            if len(results) != len(live):
                raise ToolError(f"search backend returned {len(results)} result lists for {len(live)} queries")
        except asyncio.CancelledError:
            settled = True
            if all(future.done() for _, _, future in live):
                return  # abandoned by every caller: nobody to answer
            raise
        except Exception as exc:
            settled = True
            for _, _, future in live:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, top_k, future), hits in zip(live, results, strict=True):
            if not future.done():
                future.set_result(hits[:top_k])


class SearchTool(Tool):
    """Retrieve passages for a query from a local BM25 index or a retrieval server.

    Calls from any event loop or thread are forwarded to the tool's own background loop,
    where concurrent queries are batched (up to ``max_batch_size``, waiting at most
    ``batch_wait_s``) and sent to the backend together. Failures and timeouts come back
    as :class:`~gem_core.tools.ToolResult` errors for the model.

    Args:
        retriever: A custom backend implementing :class:`~gem_tool_search.Retriever`;
            overrides ``backend``.
        **config: Fields of :class:`SearchConfig`.

    Raises:
        ConfigError: a configuration field is invalid; the message names it.

    Example:
        >>> import asyncio
        >>> tool = SearchTool(top_k=1)
        >>> result = asyncio.run(tool.execute({"query": "capital of France"}))
        >>> "Paris" in result.output
        True
        >>> tool.close()
    """

    name: ClassVar[str] = "search"
    description: ClassVar[str] = "Search a knowledge base and return the most relevant passages for a query."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to search for, in a few keywords or a question."},
            "top_k": {"type": "integer", "minimum": 1, "description": "How many passages to return."},
        },
        "required": ["query"],
    }
    tag_argument: ClassVar[str | None] = "query"
    config_model: ClassVar[type[BaseModel]] = SearchConfig

    def __init__(self, *, retriever: Retriever | None = None, **config: Any) -> None:
        try:
            self.config = SearchConfig.model_validate(config)
        except ValidationError as exc:
            raise ConfigError(format_config_error("search tool configuration", exc)) from exc
        self.retriever = retriever if retriever is not None else _make_retriever(self.config)
        self.backend = "custom" if retriever is not None else self.config.backend
        self._loop = LoopThread("gem-search")
        self._batcher = _Batcher(self.retriever, self.config.max_batch_size, self.config.batch_wait_s)
        self._closed = False

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        start = time.perf_counter()
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return ToolResult(error="search needs a non-empty 'query' string, e.g. <search>capital of France</search>")
        top_k = arguments.get("top_k", self.config.top_k)
        if isinstance(top_k, str) and top_k.strip().isdigit() and len(top_k) <= 6:
            top_k = int(top_k)
        if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= self.config.max_top_k:
            try:
                shown = repr(top_k)
            except ValueError:  # an int past str()'s digit limit
                shown = "a huge integer"
            shown = shown if len(shown) <= 40 else shown[:40] + "..."
            return ToolResult(error=f"top_k must be an integer from 1 to {self.config.max_top_k}, got {shown}")
        if self._closed:
            return ToolResult(error="the search tool was closed")
        # One query's lone surrogate must not break the batch it shares with other episodes' queries.
        query = clean_text(query.strip()[: self.config.max_query_chars])
        try:
            hits = await asyncio.wait_for(self._loop.run(self._batcher.search(query, top_k)), self.config.timeout_s)
        except asyncio.TimeoutError:
            return ToolResult(
                error=f"search timed out after {self.config.timeout_s} s", elapsed_s=time.perf_counter() - start
            )
        except Exception as exc:
            return ToolResult(error=f"search failed: {exc}", elapsed_s=time.perf_counter() - start)
        output = format_hits(hits) if hits else f"No results found for {query!r}."
        return ToolResult(
            output=output,
            elapsed_s=time.perf_counter() - start,
            metadata={
                "backend": self.backend,
                "query": query,
                "doc_ids": [hit.document.id for hit in hits],
                "scores": [hit.score for hit in hits],
            },
        )

    async def search(self, queries: Sequence[str], top_k: int | None = None) -> list[list[SearchHit]]:
        """Search many queries in one backend call, bypassing the batcher. Raises on failure."""
        return await self._loop.run(self.retriever.search(list(queries), top_k or self.config.top_k))

    def instructions(self) -> str:
        return (
            f"- search: {self.description} Call it as <search>your query</search>; "
            f"the top {self.config.top_k} passages come back as 'Doc i(Title: ...) text'."
        )

    @property
    def batches_sent(self) -> int:
        """How many backend calls the batcher made so far (for tests and benchmarks)."""
        return self._batcher.batches

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._loop.aclose(before=self.retriever.aclose)

    def close(self) -> None:
        """Synchronous :meth:`aclose`, for code without an event loop."""
        if self._closed:
            return
        self._closed = True
        self._loop.close(before=self.retriever.aclose)


def _make_retriever(config: SearchConfig) -> Retriever:
    if config.backend == "http":
        assert config.url is not None  # checked by SearchConfig
        return HttpRetriever(config.url, timeout_s=config.timeout_s, headers=config.headers)
    return BM25Retriever(config.corpus or demo_corpus_path(), k1=config.k1, b=config.b, cache_dir=config.cache_dir)
