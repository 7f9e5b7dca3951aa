# Probe: runs while the agent's processes still do (before they are killed and the checker runs).
python3 -I -c "import hashlib, urllib.request; body = urllib.request.urlopen('http://127.0.0.1:8080/index.html', timeout=5).read(); print(hashlib.sha256(body).hexdigest())"
