"""Fixtures: temporary cache dir, small corpora, a Search-R1 style HTTP server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from gem_tool_search import BM25Index, demo_corpus_path


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep BM25 caches out of the user's home."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("GEM_CACHE_DIR", str(cache))
    return cache / "search"


def _write_corpus(path: Path, docs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(doc) + "\n" for doc in docs), encoding="utf-8")
    return path


@pytest.fixture
def write_corpus() -> Callable[[Path, list[dict[str, Any]]], Path]:
    """``write_corpus(path, docs)`` writes a JSONL corpus and returns its path."""
    return _write_corpus


@pytest.fixture
def small_corpus(tmp_path: Path) -> Path:
    return _write_corpus(
        tmp_path / "small.jsonl",
        [
            {"id": "cat", "title": "Cat", "text": "The cat is a small domesticated carnivorous mammal."},
            {"id": "dog", "title": "Dog", "text": "The dog is a domesticated descendant of the wolf."},
            {"id": "wolf", "title": "Wolf", "text": "The wolf is a large canine; wolf packs hunt together."},
            {"id": "paris", "title": "Paris", "text": "Paris is the capital of France."},
            {"id": "empty", "title": "", "text": ""},
        ],
    )


class RetrievalServer:
    """A real HTTP server on 127.0.0.1 speaking Search-R1's POST /retrieve, backed by BM25 on the demo corpus.

    ``mode`` switches it to misbehave: "ok", "http500", "slow", "garbage", "no_scores".
    """

    def __init__(self) -> None:
        self.index = BM25Index.load_or_build(demo_corpus_path())
        self.requests: list[dict[str, Any]] = []
        self.mode = "ok"
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "body": body, "headers": dict(self.headers)})
                if server.mode == "slow":
                    server.release.wait(10)
                if server.mode == "http500":
                    return self._send(500, b"index not loaded")
                if server.mode == "garbage":
                    return self._send(200, b"<html>not json</html>")
                result = []
                for query in body["queries"]:
                    ranked = server.index.search(query, body.get("topk") or 3)
                    docs = server.index.documents([i for i, _ in ranked])
                    rows = []
                    for doc, (_, score) in zip(docs, ranked, strict=True):
                        record = {"id": doc.id, "contents": f'"{doc.title}"\n{doc.text}'}
                        rows.append({"document": record, "score": score} if server.mode != "no_scores" else record)
                    result.append(rows)
                self._send(200, json.dumps({"result": result}).encode())

            def _send(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/retrieve"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture
def retrieval_server() -> Iterator[RetrievalServer]:
    server = RetrievalServer()
    yield server
    server.close()
