"""What the terminal env needs from the container backend: its settings, its tasks, and a started episode."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from gem_core.errors import ToolError
from gem_terminal.container.images import BaseImages, build_task_image, plan_build
from gem_terminal.container.runtime import Runtime, detect_runtime
from gem_terminal.container.session import ContainerEpisode
from gem_terminal.loader import SkippedTask, TerminalTask
from gem_tool_python.episode import EpisodeConfig

__all__ = [
    "Backend",
    "ContainerConfig",
    "load_container_task",
    "needs_own_image",
    "runtime_for",
    "start_container_episode",
]

Backend = Literal["auto", "sandbox", "podman", "docker"]

#: The checker of a task with ``tests/test_outputs.py`` and no ``run-tests.sh`` (Terminal-Bench's default).
DEFAULT_CHECKER = "python3 -m pytest -q -p no:cacheprovider $TEST_DIR/test_outputs.py"


class ContainerConfig(BaseModel):
    """Settings of the container backend (``TerminalEnv(container={...})``).

    Attributes:
        ca_bundle: A PEM file (the host's CA bundle) copied into every build stage and container, with
            ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``, ``PIP_CERT``, ``CURL_CA_BUNDLE``, ``GIT_SSL_CAINFO``,
            ``NODE_EXTRA_CA_CERTS`` pointing at it and ``UV_NATIVE_TLS=1`` (for TLS-intercepting proxies).
            Default: ``$GEM_TERMINAL_CA_BUNDLE`` when set, else none.
        base_images: ``auto``: an image that is not here is pulled, and where the pull fails one of the
            image map's is built from Debian; ``map``: build the image map's without trying a pull;
            ``pull``: never build one.
        mirror: Debian's mirror for base images (default ``$GEM_DEBIAN_MIRROR`` or http://deb.debian.org/debian).
        build_timeout_s: Wall clock of one image build.
        checker_network: Give the checker's container the runtime's default network (Terminal-Bench's
            stock ``run-tests.sh`` installs pytest with uv at check time). The agent never has a network.
        agent_user: Run the agent's commands as this user (``uid`` or name); default: the image's ``USER``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ca_bundle: str | None = None
    base_images: BaseImages = "auto"
    mirror: str | None = None
    build_timeout_s: float = Field(1800.0, gt=0)
    checker_network: bool = False
    agent_user: str | None = Field(None, pattern=r"^[A-Za-z0-9_.:-]+$")

    def ca_path(self) -> Path | None:
        """The CA bundle to pass, if any (checked to be a file)."""
        value = self.ca_bundle or os.environ.get("GEM_TERMINAL_CA_BUNDLE") or None
        if value is None:
            return None
        path = Path(value)
        if not path.is_file():
            raise ToolError(f"container backend: ca_bundle {value!r} is not a file")
        return path


def _seconds(meta: dict[str, Any], key: str, default: float) -> float:
    value = float(meta.get(key, default))
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{key} must be a positive number of seconds, got {meta.get(key)!r}")
    return value


def load_container_task(path: Path) -> TerminalTask | SkippedTask:
    """A Terminal-Bench task folder as the container backend runs it: its image is its own Dockerfile.

    Reads ``task.yaml``, the solution, ``run-tests.sh`` (or the default pytest checker) and ``tests/``;
    the Dockerfile (or the compose file's build context) is read at build time. Never raises for what
    the folder holds: what cannot run is a :class:`SkippedTask` with the reason.
    """
    path = Path(path)
    name = path.name
    if not (path / "task.yaml").exists() and (path / "task.toml").exists():
        return SkippedTask(name, path, "a Harbor folder: the container backend reads Terminal-Bench v1 folders only")
    try:
        meta = yaml.safe_load((path / "task.yaml").read_text()) or {}
        if not isinstance(meta, dict) or not isinstance(meta.get("instruction"), str):
            return SkippedTask(name, path, "task.yaml has no instruction")
        plan_build(path)
        if (path / "solution.sh").exists():
            solution = (path / "solution.sh").read_text()
        elif (path / "solution.yaml").exists():
            steps = yaml.safe_load((path / "solution.yaml").read_text()) or []
            solution = "\n".join(str(s["command"]) if isinstance(s, dict) else str(s) for s in steps)
        else:
            return SkippedTask(name, path, "no reference solution (solution.sh or solution.yaml)")
        tests_dir = path / "tests"
        tests = {
            str(f.relative_to(tests_dir)): f.read_bytes()
            for f in sorted(tests_dir.rglob("*"))
            if f.is_file() and "__pycache__" not in f.parts
        }
        if (path / "run-tests.sh").exists():
            checker = (path / "run-tests.sh").read_text()
        elif "test_outputs.py" in tests:
            checker = DEFAULT_CHECKER
        else:
            return SkippedTask(name, path, "no checker (run-tests.sh or tests/test_outputs.py)")
        tags = meta.get("tags") or ()
        return TerminalTask(
            name=name,
            path=path,
            instruction=meta["instruction"].strip(),
            solution=solution,
            checker=checker,
            tests=tests,
            agent_timeout_s=_seconds(meta, "max_agent_timeout_sec", 600.0),
            test_timeout_s=_seconds(meta, "max_test_timeout_sec", 60.0),
            difficulty=str(meta.get("difficulty", "")),
            tags=tuple(str(t) for t in tags) if isinstance(tags, list | tuple) else (),
        )
    except ToolError as exc:
        return SkippedTask(name, path, str(exc))
    except (OSError, TypeError, ValueError, KeyError, AttributeError, yaml.YAMLError) as exc:
        return SkippedTask(name, path, f"malformed task files: {type(exc).__name__}: {exc}")


def needs_own_image(path: Path) -> bool:
    """Whether a task's image is built from somewhere else than its folder's ``Dockerfile`` (compose, Harbor)."""
    try:
        plan = plan_build(path)
    except ToolError:
        return False
    return plan.dockerfile != (Path(path).resolve() / "Dockerfile")


_runtimes: dict[str, Runtime] = {}


def runtime_for(backend: Backend) -> Runtime:
    """The runtime of a container backend (``auto``: Docker where its daemon answers, else Podman), once per process.

    Raises:
        ToolError: none is usable.
    """
    preference: Literal["auto", "podman", "docker"] = backend if backend in ("podman", "docker") else "auto"
    if preference not in _runtimes:
        _runtimes[preference] = detect_runtime(preference)
    return _runtimes[preference]


def start_container_episode(
    task: TerminalTask, backend: Backend, settings: EpisodeConfig, config: ContainerConfig
) -> ContainerEpisode:
    """Build the task's image (cached) and start its episode's container.

    Raises:
        ToolError: no runtime, or the build or the start failed.
    """
    runtime = runtime_for(backend)
    image = build_task_image(
        runtime,
        task.path,
        ca_bundle=config.ca_path(),
        base_images=config.base_images,
        mirror=config.mirror,
        timeout_s=config.build_timeout_s,
    )
    return ContainerEpisode(
        runtime, image, settings, agent_user=config.agent_user, checker_network=config.checker_network
    )
