# The service, queried while it runs with a message drawn now; "probe ok" last when it behaved.
python3 -I - <<'PY'
import json
import random
import urllib.parse
import urllib.request

rng = random.SystemRandom()


def get(path):
    with urllib.request.urlopen("http://127.0.0.1:8090" + path, timeout=5) as response:
        return response.read()


assert json.loads(get("/status")) == {"greeting": "welcome", "port": 8090}
message = "".join(rng.choice("abc xyz-019") for _ in range(rng.randrange(1, 30)))
assert get("/echo?msg=" + urllib.parse.quote(message)) == f"welcome {message}".encode()
with open("/app/svc/www/index.html", "rb") as fh:
    assert get("/files/index.html") == fh.read()
print("probe ok")
PY
