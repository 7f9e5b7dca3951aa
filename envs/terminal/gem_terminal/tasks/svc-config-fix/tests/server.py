"""A small HTTP service configured by server.ini (beside this file)."""

import configparser
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

HERE = os.path.dirname(os.path.abspath(__file__))
config = configparser.ConfigParser()
if not config.read(os.path.join(HERE, "server.ini")):
    sys.exit("server.ini is missing")
host = config.get("server", "host")
port = config.getint("server", "port")
greeting = config.get("server", "greeting")
root = config.get("files", "root")
if not os.path.isdir(root):
    sys.exit(f"files root {root} is not a folder")
log = open(config.get("server", "log"), "a", buffering=1)


class Handler(BaseHTTPRequestHandler):
    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urlparse(self.path)
        log.write(f"GET {self.path}\n")
        if url.path == "/status":
            return self.answer(200, json.dumps({"greeting": greeting, "port": port}).encode())
        if url.path == "/echo":
            return self.answer(200, f"{greeting} {parse_qs(url.query).get('msg', [''])[0]}".encode())
        if url.path.startswith("/files/"):
            name = os.path.basename(url.path)
            try:
                with open(os.path.join(root, name), "rb") as fh:
                    return self.answer(200, fh.read())
            except OSError:
                return self.answer(404, b"")
        self.answer(404, b"")

    def log_message(self, *args):
        pass


ThreadingHTTPServer((host, port), Handler).serve_forever()
