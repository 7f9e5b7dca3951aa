# The server, queried while it runs with keys and values drawn now; "probe ok" last when it behaved.
python3 -I - <<'PY'
import json
import random
import urllib.error
import urllib.request

rng = random.SystemRandom()
BASE = "http://127.0.0.1:8081"


def call(method, path, body=None):
    request = urllib.request.Request(BASE + path, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


keys = sorted({"".join(rng.choice("abcXYZ019_-") for _ in range(rng.randrange(1, 12))) for _ in range(6)})
held = {}
for key in keys:
    value = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 3000)))
    assert call("PUT", f"/kv/{key}", value)[0] == 200, key
    held[key] = value
key = rng.choice(keys)
held[key] = b"replaced " + bytes(rng.randrange(256) for _ in range(20))
assert call("PUT", f"/kv/{key}", held[key])[0] == 200
gone = rng.choice(keys)
assert call("DELETE", f"/kv/{gone}")[0] == 204
del held[gone]
assert call("DELETE", f"/kv/{gone}")[0] == 404
assert call("GET", f"/kv/{gone}")[0] == 404
for key, value in held.items():
    assert call("GET", f"/kv/{key}") == (200, value), key
status, body = call("GET", "/kv")
assert status == 200 and json.loads(body) == sorted(held), body[:200]
print("probe ok")
PY
