"""The ``gem serve`` and ``gem export openenv`` commands (gem_core.cli imports this lazily)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

from gem_core.errors import ConfigError

__all__ = ["export", "serve"]


def serve(
    env_id: str,
    kwargs: dict[str, Any],
    *,
    host: str,
    port: int,
    max_sessions: int,
    log_level: str,
    out: TextIO,
    step_timeout_s: float | None = None,
    idle_timeout_s: float | None = 600.0,
    max_hung_steps: int = 4,
) -> int:
    """Serve ``env_id`` with OpenEnv's server factory until interrupted; the exit code.

    ``idle_timeout_s`` (0: none) closes WebSocket sessions idle that long; at ``max_hung_steps`` steps past
    ``step_timeout_s`` still running the server is degraded (see :func:`gem_openenv.server.build_app`).
    """
    from gem_core.api import make

    if max_sessions < 1:
        raise ConfigError(f"--max-sessions must be at least 1, got {max_sessions}")
    if step_timeout_s is not None and not step_timeout_s > 0:
        raise ConfigError(f"--step-timeout must be a positive number of seconds, got {step_timeout_s}")
    if idle_timeout_s is not None and not idle_timeout_s >= 0:  # NaN fails too
        raise ConfigError(f"--idle-timeout must be seconds >= 0 (0: sessions may idle forever), got {idle_timeout_s}")
    if max_hung_steps < 1:
        raise ConfigError(f"--max-hung-steps must be at least 1, got {max_hung_steps}")
    make(env_id, **kwargs).close()  # wrong kwargs fail here, before OpenEnv's (slow) import

    import uvicorn

    from gem_openenv.server import build_app

    app = build_app(
        env_id,
        kwargs,
        max_sessions=max_sessions,
        step_timeout_s=step_timeout_s,
        idle_timeout_s=idle_timeout_s,
        max_hung_steps=max_hung_steps,
    )
    idle = f"idle sessions closed after {idle_timeout_s:g}s" if idle_timeout_s else "no idle timeout"
    out.write(
        f"serving {env_id} as an OpenEnv env at http://{host}:{port} "
        f"(WebSocket /ws, HTTP /reset /step /schema /mcp; up to {max_sessions} sessions; {idle})\n"
    )
    out.flush()
    uvicorn.run(app, host=host, port=port, log_level=log_level)
    return 0


def export(env_id: str, kwargs: dict[str, Any], *, directory: str | None, max_sessions: int, out: TextIO) -> int:
    """Write the OpenEnv package of ``env_id``; the exit code."""
    from gem_openenv.export import export_openenv

    written = export_openenv(
        env_id, Path(directory) if directory else None, make_kwargs=kwargs, max_sessions=max_sessions
    )
    root = written[0]
    out.write(f"created {root}\n")
    for path in written[1:]:
        out.write(f"  {path.relative_to(root)}\n")
    out.write(
        f"\nnext:\n  openenv validate {root}\n  cd {root} && uvicorn server.app:app --port 8000"
        "\n  openenv build / openenv push (needs Docker)\n"
    )
    return 0
