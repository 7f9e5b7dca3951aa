"""A BM25 retrieval server speaking Search-R1's ``POST /retrieve``, on the standard library.

Serves a JSONL corpus to any Search-R1 style client (including ``SearchTool(backend="http")``)
without Java or a GPU: ``python -m gem_tool_search.server --corpus wiki.jsonl --port 8000``.
It binds to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gem_tool_search.bm25 import BM25Index
from gem_tool_search.corpus import demo_corpus_path

__all__ = ["RetrievalServer", "main"]


class RetrievalServer:
    """Answers ``{"queries": [...], "topk": k, "return_scores": bool}`` from a BM25 index.

    The response is ``{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}``
    (documents alone when ``return_scores`` is false), ``contents`` being the quoted title, a newline and the text,
    as in Search-R1's corpora.

    Args:
        index: The index to search.
        host: Interface to bind; keep 127.0.0.1 unless the server must be reachable from elsewhere.
        port: TCP port; 0 picks a free one (see :attr:`url`).
        default_top_k: Used when a request has no ``topk``.
    """

    def __init__(self, index: BM25Index, host: str = "127.0.0.1", port: int = 0, default_top_k: int = 3) -> None:
        self.index = index
        self.default_top_k = default_top_k
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://{host}:{self.httpd.server_port}/retrieve"
        self._thread: threading.Thread | None = None

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """The response body for one decoded request body."""
        top_k = int(request.get("topk") or self.default_top_k)
        with_scores = bool(request.get("return_scores", False))
        result = []
        for query in request["queries"]:
            ranked = self.index.search(str(query), top_k)
            docs = self.index.documents([i for i, _ in ranked])
            rows: list[Any] = []
            for doc, (_, score) in zip(docs, ranked, strict=True):
                record = {"id": doc.id, "contents": f'"{doc.title}"\n{doc.text}'}
                rows.append({"document": record, "score": score} if with_scores else record)
            result.append(rows)
        return {"result": result}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive
            disable_nagle_algorithm = True  # headers and body must not wait on delayed ACKs
            wbufsize = 1 << 16

            def log_message(self, *args: Any) -> None:
                pass  # one line per request would drown training logs

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/retrieve":
                    return self._send(404, {"error": f"unknown path {self.path}; POST /retrieve"})
                try:
                    request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                    if not isinstance(request.get("queries"), list):
                        raise ValueError("'queries' must be a list of strings")
                    body = server.answer(request)
                except (ValueError, TypeError, AttributeError) as exc:
                    return self._send(400, {"error": str(exc)})
                self._send(200, body)

            def _send(self, status: int, body: dict[str, Any]) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler

    def start(self) -> RetrievalServer:
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="gem-retrieval-server", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and release the socket."""
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join()
            self._thread = None
        self.httpd.server_close()


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m gem_tool_search.server --corpus FILE [--host H] [--port P]``."""
    parser = argparse.ArgumentParser(description="BM25 retrieval server with Search-R1's POST /retrieve")
    parser.add_argument("--corpus", type=Path, default=demo_corpus_path(), help="JSONL with id, title, text")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--topk", type=int, default=3, help="default top-k when a request has none")
    args = parser.parse_args(argv)
    server = RetrievalServer(BM25Index.load_or_build(args.corpus), args.host, args.port, args.topk)
    print(f"serving {server.index.n_docs} documents at {server.url}", flush=True)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()


if __name__ == "__main__":
    main()
