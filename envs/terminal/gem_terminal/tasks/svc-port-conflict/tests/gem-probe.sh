# The api on 8082, queried while it runs with numbers drawn now; "probe ok" last when it behaved.
python3 -I - <<'PY'
import random
import urllib.request

rng = random.SystemRandom()


def get(path):
    with urllib.request.urlopen("http://127.0.0.1:8082" + path, timeout=5) as response:
        return response.read()


assert get("/health") == b"ok"
for _ in range(3):
    a, b = rng.randrange(-10**6, 10**6), rng.randrange(-10**6, 10**6)
    assert get(f"/sum?a={a}&b={b}") == str(a + b).encode(), (a, b)
print("probe ok")
PY
