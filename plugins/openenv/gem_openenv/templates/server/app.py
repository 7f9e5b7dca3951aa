"""The gem env $env_id served over OpenEnv's protocol (gem-openenv's app; OpenEnv itself is not needed).

Run: ``uvicorn server.app:app --port 8000``, ``uv run --project . server``, or the Docker image.
"""

import json

from gem_openenv.server import build_app

ENV_ID = "$env_id"
MAKE_KWARGS = json.loads($kwargs)
MAX_SESSIONS = $max_sessions

app = build_app(ENV_ID, MAKE_KWARGS, max_sessions=MAX_SESSIONS)


def main() -> None:
    """Serve on 0.0.0.0 (``--port``, default 8000)."""
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
