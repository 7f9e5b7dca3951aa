"""``gem export openenv ID``: an OpenEnv package (manifest, server app, Dockerfile, client) serving a gem id.

The package is what ``openenv init`` lays out (``openenv.yaml``, ``pyproject.toml`` with a
``server`` script, ``server/app.py`` with ``app`` and ``main()``, ``server/Dockerfile``,
``client.py``, ``models.py``), with the server built by :func:`gem_openenv.server.build_app`.
``openenv validate DIR`` passes on it; ``openenv build`` / ``push`` take it from there.

It is self-contained: no gem package is on a public index, so the wheels of gem-core, gem-openenv and
the env's own package are built into ``wheels/`` and the package pins them (``pip install
--find-links wheels .``, as its Dockerfile does); everything else comes from PyPI. OpenEnv itself is
only its typed client's (``client.py``), the ``openenv`` extra: the server runs without it.
"""

from __future__ import annotations

import importlib.util
import json
import re
import string
import subprocess
import sys
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

#: How long building one wheel may take.
WHEEL_TIMEOUT_S = 300.0


def source_dir(distribution: str) -> Path | None:
    """The local folder ``distribution`` was installed from (``pip install [-e] DIR``), if any."""
    from importlib.metadata import distributions
    from urllib.parse import unquote, urlsplit

    # Every copy of its metadata on the path: a source folder's own egg-info (on the path when Python starts
    # there) comes first and has no direct_url.json; the installed one says where it came from.
    texts = [found.read_text("direct_url.json") for found in distributions(name=distribution)]
    text = next(filter(None, texts), None)
    if not text:
        return None
    url = json.loads(text).get("url", "")
    parts = urlsplit(url)
    if parts.scheme != "file" or "dir_info" not in json.loads(text):
        return None
    return Path(unquote(parts.path))


def build_wheels(distributions: list[str], wheels: Path) -> list[str]:
    """Wheels of ``distributions`` built into ``wheels``; the requirements that pin them (``name==version``).

    A distribution installed from a local folder is built from it; one installed from an index is
    required by version (the index has it).

    Raises:
        ConfigError: a wheel does not build (pip's message names why).
    """
    from importlib.metadata import version

    wheels.mkdir(parents=True, exist_ok=True)
    requirements = []
    for name in distributions:
        folder = source_dir(name)
        if folder is not None:
            argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "--wheel-dir", str(wheels), str(folder)]
            if importlib.util.find_spec("setuptools") is not None:  # gem's packages build with it: no isolated env
                argv.append("--no-build-isolation")
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=WHEEL_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise ConfigError(
                    f"building the wheel of {name} from {folder} took over {WHEEL_TIMEOUT_S:g}s"
                ) from None
            if done.returncode != 0:
                raise ConfigError(f"cannot build the wheel of {name} from {folder}: {done.stderr.strip()[-800:]}")
        requirements.append(f"{name}=={version(name)}")
    return requirements


#: OpenEnv's runtime plan (``validation.execution.probe_path``): the reset and actions its runtime checks play.
PLAN = "validation/runtime.json"
#: How many actions the plan holds (the env's own sample actions).
PLAN_ACTIONS = 3


def runtime_plan(env: Any) -> dict[str, Any]:
    """OpenEnv 0.10's runtime plan for ``openenv validate``: a seeded reset and a few of the env's sample actions.

    An env without ``sample_random_action`` is probed with a plain reply; its format error is a valid step.
    """
    try:
        actions = [str(env.sample_random_action()) for _ in range(PLAN_ACTIONS)]
    except NotImplementedError:
        actions = ["hello"]
    return {
        "plan_schema_version": "1",
        "reset": {"episode_id": "gem-export-probe", "seed": 0},
        "actions": [{"text": action} for action in actions],
    }


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
        ConfigError: the folder exists and is not empty, or a wheel does not build.
        GemCoreError: the id is unknown or does not build with ``make_kwargs``.
    """
    from gem_core.plugins import get_discovery

    name = package_name(env_id)
    root = Path(directory) if directory is not None else Path(f"openenv-{name}")
    if root.exists() and any(root.iterdir()):
        raise ConfigError(f"{root} exists and is not empty; pick another --dir")
    from gem_openenv.server import GemEnvironment

    probe = GemEnvironment(env_id, make_kwargs)  # a wrong id or kwargs fails before anything is written
    tools = sorted(probe.tools)
    plan = runtime_plan(probe.env)
    probe.close()
    distribution = get_discovery().registry.spec(env_id).distribution
    if distribution in ("gem-core", None):
        distribution = None
    written = [root]
    deps = build_wheels(["gem-core", "gem-openenv", *([distribution] if distribution else [])], root / "wheels")
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
    (root / PLAN).parent.mkdir(parents=True, exist_ok=True)
    (root / PLAN).write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")
    written.append(root / PLAN)
    written += sorted((root / "wheels").glob("*.whl"))
    return written
