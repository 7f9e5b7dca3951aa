"""The HTTP backend against a real Search-R1 style server on 127.0.0.1 (see conftest.RetrievalServer)."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest
from gem_tool_search import HttpRetriever, SearchTool
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from gem_core.errors import ToolError
from gem_core.tools import ToolResult

QUERIES = ["Jupiter", "Eiffel Tower", "penicillin", "capital of Canada", "tallest building"]


def run(tool: SearchTool, **arguments: Any) -> ToolResult:
    return asyncio.run(tool.execute(arguments))


def wait_until(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


@pytest.fixture
def http_tool(retrieval_server: Any) -> SearchTool:
    tool = SearchTool(
        backend="http", url=retrieval_server.url, top_k=2, timeout_s=30.0, headers={"X-Api-Key": "k"}, batch_wait_s=0.5
    )
    yield tool
    tool.close()


def test_results_match_the_local_bm25_backend(http_tool: SearchTool) -> None:
    local = SearchTool(top_k=2)
    try:
        for query in ["Who discovered penicillin?", "capital of Canada", "tallest building"]:
            remote_result, local_result = run(http_tool, query=query), run(local, query=query)
            assert remote_result.ok, remote_result.error
            assert remote_result.metadata["doc_ids"] == local_result.metadata["doc_ids"]
            assert remote_result.output == local_result.output  # titles parsed out of Search-R1 "contents"
            assert remote_result.metadata["backend"] == "http"
    finally:
        local.close()


def test_request_shape_and_one_post_per_batch(http_tool: SearchTool, retrieval_server: Any) -> None:
    async def main() -> list[ToolResult]:
        return await asyncio.gather(
            *(http_tool.execute({"query": f"capital of {c}"}) for c in ["Chile", "Peru", "Cuba"])
        )

    results = asyncio.run(main())
    assert [r.output.splitlines()[0].split(")")[0] for r in results] == [
        "Doc 1(Title: Chile",
        "Doc 1(Title: Peru",
        "Doc 1(Title: Cuba",
    ]
    assert len(retrieval_server.requests) == 1
    request = retrieval_server.requests[0]
    assert request["path"] == "/retrieve"
    assert request["body"] == {
        "queries": ["capital of Chile", "capital of Peru", "capital of Cuba"],
        "topk": 2,
        "return_scores": True,
    }
    assert request["headers"]["X-Api-Key"] == "k"


def test_connection_is_reused_across_calls_and_loops(http_tool: SearchTool, retrieval_server: Any) -> None:
    for _ in range(3):
        assert run(http_tool, query="Jupiter").ok  # a new caller loop each time
    assert len(retrieval_server.requests) == 3


def test_response_without_scores_is_accepted(http_tool: SearchTool, retrieval_server: Any) -> None:
    retrieval_server.mode = "no_scores"
    result = run(http_tool, query="Eiffel Tower")
    assert result.ok and "Eiffel Tower" in result.output and result.metadata["scores"] == [0.0, 0.0]


@pytest.mark.parametrize(
    ("mode", "message"),
    [("http500", "answered HTTP 500: index not loaded"), ("garbage", "no JSON 'result' field")],
    ids=["http-500", "not-json"],
)
def test_server_errors_are_returned_to_the_model(
    http_tool: SearchTool, retrieval_server: Any, mode: str, message: str
) -> None:
    retrieval_server.mode = mode
    result = run(http_tool, query="anything")
    assert not result.ok and message in (result.error or "")
    retrieval_server.mode = "ok"
    assert run(http_tool, query="anything").ok


def test_slow_server_times_out(retrieval_server: Any) -> None:
    retrieval_server.mode = "slow"
    tool = SearchTool(backend="http", url=retrieval_server.url, timeout_s=0.3)
    result = run(tool, query="slow")
    assert not result.ok and "timed out" in (result.error or "")
    retrieval_server.release.set()
    tool.close()


def test_unreachable_server_is_an_error() -> None:
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    tool = SearchTool(backend="http", url=f"http://127.0.0.1:{port}/retrieve", timeout_s=30.0)
    result = run(tool, query="x")
    assert not result.ok and "unreachable" in (result.error or "")
    tool.close()


def test_wrong_number_of_result_lists_is_rejected() -> None:
    retriever = HttpRetriever("http://127.0.0.1:1/retrieve")
    with pytest.raises(ToolError, match="returned 1 result lists for 2 queries"):
        retriever._parse('{"result": [[]]}', 2)


@settings(
    max_examples=4,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@example(plan=[("Jupiter", True), ("Eiffel Tower", False), ("penicillin", True), ("capital of Canada", False)])
@given(plan=st.lists(st.tuples(st.sampled_from(QUERIES), st.booleans()), min_size=1, max_size=4))
def test_a_late_reply_never_answers_a_later_query(retrieval_server: Any, plan: list[tuple[str, bool]]) -> None:
    """Any mix of answered and timed-out queries on the real server: each answer is its own query's, fresh."""
    server = retrieval_server
    tool = SearchTool(backend="http", url=server.url, top_k=2, timeout_s=2.0)
    local = SearchTool(top_k=2)
    try:
        for query, slow in plan:
            server.mode = "slow" if slow else "ok"
            server.release.clear()
            result = run(tool, query=query)
            if slow:
                assert not result.ok and "timed out" in (result.error or "")
                # every caller gave up: the request was stopped and its connections dropped
                assert wait_until(lambda: tool.retriever._session is None)  # type: ignore[attr-defined]
                server.mode = "ok"
                server.release.set()  # the late reply goes out now, to a connection nobody reads
            else:
                assert result.ok, result.error
                assert result.metadata["doc_ids"] == run(local, query=query).metadata["doc_ids"]
    finally:
        server.release.set()
        tool.close()
        local.close()
