"""A tiny HTTP client configuration."""

HOST = "example.org"
TIMEOUT = 10


def url(path):
    return f"https://{HOST}/{path.lstrip('/')}"
