"""The public api: /health, and /sum?a=A&b=B computed by the backend (its URL in api.ini)."""

import configparser
import os
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlparse

config = configparser.ConfigParser()
config.read(os.path.join(os.path.dirname(os.path.abspath(__file__)), "api.ini"))
PORT = config.getint("api", "port")
BACKEND = config.get("api", "backend_url").rstrip("/")


class Handler(BaseHTTPRequestHandler):
    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/health":
            return self.answer(200, b"ok")
        if url.path == "/sum":
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            try:
                with urllib.request.urlopen(f"{BACKEND}/add?{urlencode(query)}", timeout=5) as response:
                    return self.answer(200, response.read())
            except OSError as exc:
                return self.answer(502, f"backend: {exc}".encode())
        self.answer(404, b"")

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
