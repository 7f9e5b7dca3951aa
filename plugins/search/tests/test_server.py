"""The packaged BM25 retrieval server, probed with plain urllib and with the search tool."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from gem_tool_search import BM25Index, SearchTool, demo_corpus_path
from gem_tool_search.server import RetrievalServer


def post(url: str, body: Any) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


@pytest.fixture
def server() -> Iterator[RetrievalServer]:
    srv = RetrievalServer(BM25Index.load_or_build(demo_corpus_path())).start()
    yield srv
    srv.close()


def test_search_r1_response_shape(server: RetrievalServer) -> None:
    status, body = post(server.url, {"queries": ["capital of Chile", "Marie Curie"], "topk": 2, "return_scores": True})
    assert status == 200 and len(body["result"]) == 2
    first = body["result"][0][0]
    assert first["document"]["contents"].startswith('"Chile"\nChile is a country')
    assert isinstance(first["score"], float) and first["score"] > body["result"][0][1]["score"]


def test_without_scores_and_default_top_k(server: RetrievalServer) -> None:
    status, body = post(server.url, {"queries": ["Jupiter moons"]})
    assert status == 200 and len(body["result"][0]) == 3 and "contents" in body["result"][0][0]


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [("/retrieve", {"queries": "not a list"}, 400), ("/retrieve", [1], 400), ("/search", {"queries": []}, 404)],
    ids=["queries-not-list", "body-not-object", "wrong-path"],
)
def test_bad_requests(server: RetrievalServer, path: str, body: Any, status: int) -> None:
    got, answer = post(server.url.replace("/retrieve", path), body)
    assert got == status and answer["error"]


def test_search_tool_against_the_packaged_server(server: RetrievalServer) -> None:
    tool = SearchTool(backend="http", url=server.url, top_k=1)
    result = asyncio.run(tool.execute({"query": "Who invented the telephone?"}))
    tool.close()
    assert result.ok and "Bell" in result.output


def test_command_line(tmp_path: Any) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gem_tool_search.server", "--port", str(port)],
        stdout=subprocess.PIPE,
        env={"GEM_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    try:
        assert proc.stdout is not None
        assert f"127.0.0.1:{port}/retrieve" in proc.stdout.readline().decode()
        deadline = time.monotonic() + 30
        while True:
            try:
                status, body = post(f"http://127.0.0.1:{port}/retrieve", {"queries": ["Eiffel Tower"], "topk": 1})
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert status == 200 and body["result"][0][0]["id"]
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()  # type: ignore[union-attr]
