"""``gem export openenv ID``: an OpenEnv package (manifest, server app, Dockerfile, client) serving a gem id.

The package is what ``openenv init`` lays out (``openenv.yaml``, ``pyproject.toml`` with a
``server`` script, ``server/app.py`` with ``app`` and ``main()``, ``server/Dockerfile``,
``client.py``, ``models.py``), with the server built by :func:`gem_openenv.server.build_app`.
``openenv validate DIR`` passes on it; ``openenv build`` / ``push`` take it from there.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from gem_core.errors import ConfigError

__all__ = ["export_openenv", "package_name"]


def package_name(env_id: str) -> str:
    """The OpenEnv env name of a gem id: ``game:Wordle-v0`` -> ``game_wordle_v0``."""
    return re.sub(r"[^a-z0-9]+", "_", env_id.lower()).strip("_")


#: The package's files, relative to its folder (templates shipped in ``gem_openenv/templates``).
FILES = (
    "openenv.yaml",
    "pyproject.toml",
    "README.md",
    "__init__.py",
    "models.py",
    "client.py",
    "server/__init__.py",
    "server/app.py",
    "server/Dockerfile",
)


def _tool_names(environment: Any) -> list[str]:
    server = environment.mcp_server
    if server is None:
        return []
    from openenv.core.env_server.mcp_environment import get_server_tools

    return list(get_server_tools(server))


def _render(relative: str, values: Mapping[str, str]) -> str:
    template = resources.files("gem_openenv").joinpath("templates", *relative.split("/")).read_text(encoding="utf-8")
    return string.Template(template).substitute(values)


def export_openenv(
    env_id: str,
    directory: Path | None = None,
    *,
    make_kwargs: Mapping[str, Any] | None = None,
    max_sessions: int = 8,
    reward_range: tuple[float, float] = (-1.0, 1.0),
) -> list[Path]:
    """Write the OpenEnv package serving ``env_id``; the paths written, the folder first.

    Args:
        env_id: A registered gem id (checked: it must build).
        directory: Where to write (default ``./openenv-<name>``); must not exist or be empty.
        make_kwargs: Constructor overrides baked into the server.
        max_sessions: Concurrent sessions the server allows.
        reward_range: The per-turn reward range the manifest declares.

    Raises:
        ConfigError: the folder exists and is not empty.
        GemCoreError: the id is unknown or does not build with ``make_kwargs``.
    """
    from gem_core.plugins import get_discovery

    name = package_name(env_id)
    root = Path(directory) if directory is not None else Path(f"openenv-{name}")
    if root.exists() and any(root.iterdir()):
        raise ConfigError(f"{root} exists and is not empty; pick another --dir")
    from gem_openenv.server import GemEnvironment

    probe = GemEnvironment(env_id, make_kwargs)  # a wrong id or kwargs fails before anything is written
    tools = sorted(_tool_names(probe))
    probe.close()
    distribution = get_discovery().registry.spec(env_id).distribution
    if distribution in ("gem-core", None):
        distribution = None
    written = [root]
    deps = ["openenv>=0.10,<0.11", "gem-core", "gem-openenv", *([distribution] if distribution else [])]
    values = {
        "name": name,
        "env_id": env_id,
        "namespace": env_id.split(":", 1)[0],
        "dependencies": "".join(f'    "{d}",\n' for d in deps),
        "kwargs": repr(json.dumps(dict(make_kwargs or {}), sort_keys=True)),
        "max_sessions": str(max_sessions),
        "tools": ", ".join(tools),
        "reward_low": str(float(reward_range[0])),
        "reward_high": str(float(reward_range[1])),
    }
    for relative in FILES:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_render(relative, values), encoding="utf-8")
        written.append(path)
    return written
