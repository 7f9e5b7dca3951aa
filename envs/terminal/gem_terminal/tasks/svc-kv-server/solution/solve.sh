#!/bin/bash
set -e
cat > /app/kv.py <<'PY'
"""A key-value store over HTTP on 127.0.0.1:8081 (PUT/GET/DELETE /kv/KEY, GET /kv)."""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STORE, LOCK = {}, threading.Lock()
KEY = re.compile(r"/kv/([A-Za-z0-9_-]+)")


class Handler(BaseHTTPRequestHandler):
    def answer(self, status, body=b"", kind="application/octet-stream"):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def key(self):
        match = KEY.fullmatch(self.path)
        return match.group(1) if match else None

    def do_GET(self):
        if self.path == "/kv":
            with LOCK:
                return self.answer(200, json.dumps(sorted(STORE)).encode(), "application/json")
        key = self.key()
        with LOCK:
            value = STORE.get(key) if key else None
        return self.answer(200, value) if value is not None else self.answer(404)

    def do_PUT(self):
        key = self.key()
        if key is None:
            return self.answer(400)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with LOCK:
            STORE[key] = body
        self.answer(200)

    def do_DELETE(self):
        key = self.key()
        with LOCK:
            found = key in STORE
            STORE.pop(key, None)
        self.answer(204 if found else 404)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", 8081), Handler).serve_forever()
PY
nohup python3 /app/kv.py > /app/kv.log 2>&1 &
for _ in $(seq 200); do curl -sf http://127.0.0.1:8081/kv >/dev/null && break; sleep 0.05; done
curl -sf http://127.0.0.1:8081/kv
