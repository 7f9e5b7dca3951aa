"""What the terminal env needs from the container backend: its settings, its tasks, and a started episode."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gem_core.errors import ToolError
from gem_terminal.container.images import (
    MODULE_HOSTS,
    BaseImages,
    build_task_image,
    host_answers,
    module_downloads,
    no_stand_in_note,
    unresolvable_images,
)
from gem_terminal.container.runtime import Runtime, detect_runtime
from gem_terminal.container.session import ContainerEpisode, solution_programs
from gem_terminal.loader import SkippedTask, TerminalTask, load_task
from gem_tool_python.episode import EpisodeConfig

__all__ = [
    "Backend",
    "ContainerConfig",
    "RuntimeChoice",
    "load_for_container",
    "runtime_for",
    "start_container_episode",
]

Backend = Literal["auto", "sandbox", "podman", "docker"]
RuntimeChoice = Literal["auto", "podman", "docker"]


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
        runtime: The runtime of ``backend="auto"``'s containers: ``auto`` (Docker where its daemon
            answers, else Podman), ``docker`` or ``podman``. ``backend="docker"``/``"podman"`` name their
            own; another ``runtime`` beside them is a configuration error.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ca_bundle: str | None = None
    base_images: BaseImages = "auto"
    mirror: str | None = None
    build_timeout_s: float = Field(1800.0, gt=0)
    checker_network: bool = False
    agent_user: str | None = Field(None, pattern=r"^[A-Za-z0-9_.:-]+$")
    runtime: RuntimeChoice = "auto"

    def ca_path(self) -> Path | None:
        """The CA bundle to pass, if any (checked to be a file)."""
        value = self.ca_bundle or os.environ.get("GEM_TERMINAL_CA_BUNDLE") or None
        if value is None:
            return None
        path = Path(value)
        if not path.is_file():
            raise ToolError(f"container backend: ca_bundle {value!r} is not a file")
        return path


def load_for_container(path: Path, runtime: Runtime, config: ContainerConfig) -> TerminalTask | SkippedTask:
    """A task folder (Terminal-Bench v1 or Harbor) as a container backend runs it, or why it cannot (one line).

    :func:`gem_terminal.loader.load_task` with ``backend="container"``, then the images its ``FROM`` lines
    name: one that is not in the local store, has no stand-in in the image map and that no registry
    serves refuses the task here, at load, rather than at its first ``reset``; so does a build that
    downloads Go or Rust modules (:func:`gem_terminal.container.images.module_downloads`) from a host that
    does not answer here.
    """
    task = load_task(path, backend="container")
    if isinstance(task, SkippedTask):
        return task
    missing = unresolvable_images(runtime, task, config.base_images)
    if missing:
        note = no_stand_in_note(missing[0])
        return SkippedTask(
            task.name,
            task.path,
            f"its image builds FROM {missing[0]}, which is not here, has no stand-in in the image map"
            " and no registry serves it" + (f" ({note})" if note else ""),
        )
    for host, why in module_downloads(task):
        if not host_answers(host):
            return SkippedTask(
                task.name,
                task.path,
                f"its image build downloads from {host}, which does not answer here: {why}"
                + (
                    " (vendored modules build: vendor/, -mod=vendor, cargo vendor)"
                    if host in MODULE_HOSTS.values()
                    else ""
                ),
            )
    return task


_runtimes: dict[str, Runtime] = {}


def runtime_for(backend: Backend, choice: RuntimeChoice = "auto") -> Runtime:
    """The runtime of a container backend, detected once per process.

    ``backend`` names it (``docker``, ``podman``), else ``choice`` does (``auto``: Docker where its daemon
    answers, else Podman).

    Raises:
        ToolError: none is usable.
    """
    preference: RuntimeChoice = backend if backend in ("podman", "docker") else choice
    if preference not in _runtimes:
        _runtimes[preference] = detect_runtime(preference)
    return _runtimes[preference]


def start_container_episode(
    task: TerminalTask, backend: Backend, settings: EpisodeConfig, config: ContainerConfig, cpus: float | None = None
) -> ContainerEpisode:
    """Build the task's image (cached) and start its episode's container (``cpus``: its ``--cpus``).

    Raises:
        ToolError: no runtime, or the build or the start failed.
    """
    runtime = runtime_for(backend, config.runtime)
    image = build_task_image(
        runtime,
        task,
        ca_bundle=config.ca_path(),
        base_images=config.base_images,
        mirror=config.mirror,
        timeout_s=config.build_timeout_s,
    )
    return ContainerEpisode(
        runtime,
        image,
        settings,
        workdir=_workdir(task),
        agent_user=config.agent_user,
        checker_network=config.checker_network,
        cpus=cpus,
        agent_programs=solution_programs(task.solution),
    )


def _workdir(task: TerminalTask) -> str | None:
    """Where commands start when the task sets it beyond its image; ``None``: the image's ``WORKDIR``.

    Compose ``working_dir`` and Harbor's ``[environment] workdir`` do.
    """
    if task.image is not None and task.workdir == (task.image.workdir or "/app"):
        return None
    return task.workdir if task.image is not None or task.workdir != "/app" else None
