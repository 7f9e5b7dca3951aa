"""The ``gem serve`` and ``gem export openenv`` commands.

gem-openenv's plugin declares them through gem's ``register_commands`` hook
(:mod:`gem_openenv.plugin`); gem's CLI imports this module only when one of them runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from gem_core.cli_values import parse_kwargs
from gem_core.errors import ConfigError

if TYPE_CHECKING:
    from gem_core.cli import Streams

__all__ = ["export", "export_arguments", "run_export", "run_serve", "serve", "serve_arguments"]


def serve_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``gem serve``."""
    p.add_argument("env_id")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (0.0.0.0 for every one)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-sessions", type=int, default=8, help="concurrent sessions; more get CAPACITY_REACHED")
    p.add_argument(
        "--step-timeout",
        type=float,
        default=None,
        help="seconds one reset or step (or MCP tool call) may take; past it the episode is lost",
    )
    p.add_argument(
        "--idle-timeout", type=float, default=600.0, help="seconds a session may idle before it is closed (0: never)"
    )
    p.add_argument(
        "--max-hung-steps",
        type=int,
        default=4,
        help="resets/steps past --step-timeout still running before they are refused",
    )
    p.add_argument("--kw", action="append", default=[], metavar="KEY=VALUE", help="constructor override")
    p.add_argument("--log-level", default="warning", help="uvicorn's log level")


def run_serve(args: argparse.Namespace, streams: Streams) -> int:
    """``gem serve``: an unknown id fails (exit 2) before a port is bound."""
    from gem_core.cli import registry_for

    registry_for(streams, env_id=args.env_id).resolve(args.env_id)
    return serve(
        args.env_id,
        parse_kwargs(args.kw),
        host=args.host,
        port=args.port,
        max_sessions=args.max_sessions,
        step_timeout_s=args.step_timeout,
        idle_timeout_s=args.idle_timeout,
        max_hung_steps=args.max_hung_steps,
        log_level=args.log_level,
        out=streams.out,
    )


def export_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``gem export``."""
    p.add_argument("format", choices=("openenv",), help="what to write: an OpenEnv package")
    p.add_argument("env_id")
    p.add_argument("--dir", help="where to write it (default: ./openenv-NAME)")
    p.add_argument("--max-sessions", type=int, default=8, help="concurrent sessions the server allows")
    p.add_argument("--kw", action="append", default=[], metavar="KEY=VALUE", help="constructor override")


def run_export(args: argparse.Namespace, streams: Streams) -> int:
    """``gem export openenv``."""
    from gem_core.cli import registry_for

    registry_for(streams, env_id=args.env_id).resolve(args.env_id)
    return export(
        args.env_id, parse_kwargs(args.kw), directory=args.dir, max_sessions=args.max_sessions, out=streams.out
    )


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
    """Serve ``env_id`` over OpenEnv's protocol until interrupted; the exit code.

    ``step_timeout_s`` bounds each reset and step; ``idle_timeout_s`` (0: none) closes WebSocket sessions
    idle that long; at ``max_hung_steps`` calls past ``step_timeout_s`` still running the server is
    degraded (see :func:`gem_openenv.server.build_app`).
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
    make(env_id, **kwargs).close()  # wrong kwargs fail here, before a port is bound

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
