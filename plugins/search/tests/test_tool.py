"""The search tool: registry, arguments, configuration, batching, timeouts, shutdown."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from gem_tool_search import SearchHit, SearchTool
from gem_tool_search.corpus import Document

import gem_core
from gem_core.errors import ConfigError
from gem_core.tools import Tool, ToolResult


class SlowRetriever:
    """A backend that records batches and can be made slow or failing."""

    def __init__(self, delay_s: float = 0.0, fail: bool = False) -> None:
        self.delay_s = delay_s
        self.fail = fail
        self.batches: list[tuple[list[str], int]] = []
        self.closed = 0

    async def search(self, queries: Sequence[str], top_k: int) -> list[list[SearchHit]]:
        self.batches.append((list(queries), top_k))
        await asyncio.sleep(self.delay_s)
        if self.fail:
            raise RuntimeError("index exploded")
        return [[SearchHit(Document(f"{q}-{i}", q, f"text {i}"), float(-i)) for i in range(top_k)] for q in queries]

    async def aclose(self) -> None:
        self.closed += 1


def run(tool: Tool, **arguments: object) -> ToolResult:
    return asyncio.run(tool.execute(dict(arguments)))


@pytest.fixture
def tool() -> SearchTool:
    built = gem_core.make_tool("search", top_k=2)
    assert isinstance(built, SearchTool)
    yield built
    built.close()


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What is the capital of Australia?", "Canberra"),
        ("Who discovered penicillin?", "Alexander Fleming"),
        ("Who wrote Pride and Prejudice?", "Jane Austen"),
        ("Which planet is the largest in the Solar System?", "Jupiter"),
        ("What is the chemical symbol of gold?", "Au"),
        ("When did the Berlin Wall fall?", "1989"),
        ("How many sides does a heptagon have?", "seven"),
        ("Which country hosted the 2016 Summer Olympics?", "Brazil"),
        ("What is the hardest natural mineral?", "Diamond"),
    ],
    ids=["capital", "penicillin", "austen", "planet", "gold", "berlin-wall", "heptagon", "olympics", "diamond"],
)
def test_demo_corpus_answers_questions(tool: SearchTool, question: str, expected: str) -> None:
    result = run(tool, query=question)
    assert result.ok
    first = result.output.splitlines()[0]
    assert first.startswith("Doc 1(Title: ") and expected in first
    assert len(result.metadata["doc_ids"]) == 2 and result.metadata["backend"] == "bm25"
    assert result.metadata["scores"] == sorted(result.metadata["scores"], reverse=True)


def test_registered_with_schema_and_tag_syntax(tool: SearchTool) -> None:
    assert "search" in gem_core.get_registry().tools
    assert tool.schema()["function"]["parameters"]["required"] == ["query"]
    assert tool.tag_argument == "query"
    assert "<search>" in tool.instructions()


def test_call_can_ask_for_its_own_top_k(tool: SearchTool) -> None:
    assert len(run(tool, query="capital", top_k=5).metadata["doc_ids"]) == 5
    assert len(run(tool, query="capital", top_k="4").metadata["doc_ids"]) == 4


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "non-empty 'query'"),
        ({"query": "   "}, "non-empty 'query'"),
        ({"query": 3}, "non-empty 'query'"),
        ({"query": "x", "top_k": 0}, "top_k must be an integer from 1 to 20"),
        ({"query": "x", "top_k": 500}, "top_k must be"),
        ({"query": "x", "top_k": True}, "top_k must be"),
        ({"query": "x", "top_k": "many"}, "top_k must be"),
    ],
    ids=["missing", "blank", "not-str", "zero", "too-many", "bool", "word"],
)
def test_bad_arguments_come_back_as_errors(tool: SearchTool, arguments: dict[str, object], message: str) -> None:
    result = asyncio.run(tool.execute(arguments))
    assert not result.ok and message in (result.error or "")


def test_no_match_is_a_normal_answer(tool: SearchTool) -> None:
    result = run(tool, query="qwxzv")
    assert result.ok and "No results" in result.output and result.metadata["doc_ids"] == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"backend": "http"}, "needs url"),
        ({"backend": "http", "url": "ftp://x"}, "must start with http"),
        ({"url": "http://x/retrieve"}, "url is for backend='http'"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 30}, "exceeds max_top_k"),
        ({"backend": "faiss"}, "backend"),
        ({"colour": "blue"}, "colour"),
    ],
    ids=["http-no-url", "bad-scheme", "url-with-bm25", "top-k-zero", "top-k-over-max", "bad-backend", "unknown-field"],
)
@pytest.mark.parametrize("build", ["make_tool", "constructor"])
def test_bad_config_raises_config_error_naming_the_field(kwargs: dict[str, object], field: str, build: str) -> None:
    with pytest.raises(ConfigError, match=field):
        if build == "make_tool":
            gem_core.make_tool("search", **kwargs)
        else:
            SearchTool(**kwargs)


def test_missing_corpus_is_an_error_for_the_model(tmp_path: Path) -> None:
    tool = SearchTool(corpus=tmp_path / "absent.jsonl")
    result = run(tool, query="x")
    assert not result.ok and "absent.jsonl" in (result.error or "") and "does not exist" in (result.error or "")
    tool.close()


def test_concurrent_calls_are_batched() -> None:
    backend = SlowRetriever()
    tool = SearchTool(retriever=backend, batch_wait_s=0.5, max_batch_size=64)

    async def main() -> list[ToolResult]:
        return await asyncio.gather(*(tool.execute({"query": f"q{i}", "top_k": 1 + i % 3}) for i in range(10)))

    results = asyncio.run(main())
    assert len(backend.batches) == 1
    queries, top_k = backend.batches[0]
    assert sorted(queries) == sorted(f"q{i}" for i in range(10)) and top_k == 3
    # Each caller gets its own query's hits, cut to its own top_k.
    for i, result in enumerate(results):
        assert result.metadata["doc_ids"] == [f"q{i}-{j}" for j in range(1 + i % 3)]
    tool.close()


def test_batches_are_capped_at_max_batch_size() -> None:
    backend = SlowRetriever()
    tool = SearchTool(retriever=backend, batch_wait_s=0.5, max_batch_size=4)

    async def main() -> None:
        await asyncio.gather(*(tool.execute({"query": f"q{i}"}) for i in range(10)))

    asyncio.run(main())
    assert sorted(len(q) for q, _ in backend.batches) == [2, 4, 4]
    assert tool.batches_sent == 3
    tool.close()


def test_callers_on_different_loops_and_threads_share_one_batch() -> None:
    backend = SlowRetriever()
    tool = SearchTool(retriever=backend, batch_wait_s=1.0)
    results: list[ToolResult] = []
    barrier = threading.Barrier(4)

    def worker(i: int) -> None:
        barrier.wait()
        results.append(asyncio.run(tool.execute({"query": f"t{i}"})))  # a fresh event loop per thread

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.ok for r in results) and len(results) == 4
    assert len(backend.batches) == 1 and len(backend.batches[0][0]) == 4
    tool.close()


def test_timeout_is_returned_and_the_tool_keeps_working() -> None:
    backend = SlowRetriever(delay_s=10.0)
    tool = SearchTool(retriever=backend, timeout_s=1.0, batch_wait_s=0)
    result = run(tool, query="slow")
    assert not result.ok and "timed out after 1.0 s" in (result.error or "")
    backend.delay_s = 0.0
    assert run(tool, query="fast").ok
    tool.close()


def test_backend_failure_is_returned_as_error() -> None:
    tool = SearchTool(retriever=SlowRetriever(fail=True))
    result = run(tool, query="boom")
    assert not result.ok and "search failed: index exploded" in (result.error or "")
    tool.close()


def test_close_is_idempotent_and_releases_the_backend() -> None:
    backend = SlowRetriever()
    tool = SearchTool(retriever=backend)
    assert run(tool, query="x").ok
    asyncio.run(tool.aclose())
    asyncio.run(tool.aclose())
    tool.close()
    assert backend.closed == 1
    assert "closed" in (run(tool, query="x").error or "")


def test_close_without_use_starts_nothing() -> None:
    before = set(threading.enumerate())
    tool = SearchTool()
    tool.close()
    assert set(threading.enumerate()) == before


def test_batch_search_api(tool: SearchTool) -> None:
    hits = asyncio.run(tool.search(["capital of Japan", "deepest ocean Mariana Trench"], top_k=1))
    assert [h[0].document.title for h in hits] == ["Japan", "Pacific Ocean"]


def test_tools_on_the_same_corpus_share_one_index(small_corpus: Path) -> None:
    first, second = SearchTool(corpus=small_corpus), SearchTool(corpus=small_corpus)
    other = SearchTool(corpus=small_corpus, k1=1.5)
    for tool in (first, second, other):
        assert run(tool, query="wolf").ok
    assert first.retriever.index() is second.retriever.index()  # type: ignore[attr-defined]
    assert other.retriever.index() is not first.retriever.index()  # type: ignore[attr-defined]
    for tool in (first, second, other):
        tool.close()
