"""The backend: /add?a=A&b=B answers A + B (integers)."""

import configparser
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

config = configparser.ConfigParser()
config.read(os.path.join(os.path.dirname(os.path.abspath(__file__)), "backend.ini"))
PORT = config.getint("backend", "port")


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        url = urlparse(self.path)
        query = parse_qs(url.query)
        try:
            body, status = str(int(query["a"][0]) + int(query["b"][0])).encode(), 200
        except (KeyError, ValueError):
            body, status = b"bad numbers", 400
        self.send_response(status if url.path == "/add" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
