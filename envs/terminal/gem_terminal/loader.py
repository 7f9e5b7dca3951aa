"""Terminal tasks in their owners' formats (Terminal-Bench v1 and Harbor / Terminal-Bench 2), and what can run them.

Terminal-Bench v1 folder::

    task.yaml            instruction; max_agent_timeout_sec (360), max_test_timeout_sec (60), difficulty, tags...
    Dockerfile           the image (its build context is the folder, or the compose file's ``build:``)
    docker-compose.yaml  optional: one service (``client``); ``build: context/dockerfile/args`` honoured
    run-tests.sh         the checker; exit 0 = solved
    tests/               copied to /tests for the checker only
    solution.sh | solution.yaml   the reference solution

Harbor folder::

    task.toml            version, [metadata], [verifier] timeout_sec, [agent] timeout_sec, [environment] ...
    instruction.md       the instruction
    environment/         Dockerfile (build context) and optional docker-compose.yaml
    solution/solve.sh    the reference solution (optional in Harbor)
    tests/test.sh        the verifier: writes the reward to /logs/verifier/reward.txt (or reward.json)

:func:`load_task` reads both into one :class:`TerminalTask`, keeping what a container backend needs to
build the task's own image (Dockerfile, build context, compose build info, base image, Python version)
and what the no-daemon sandbox needs instead (the files for its layer, set-up commands, whether they
need root). A task nothing here can run becomes a :class:`SkippedTask` with one line saying why.
"""

from __future__ import annotations

import base64
import glob
import math
import os
import posixpath
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from gem_terminal.dockerfile import CopyStep, DockerfileError, DockerImage, RunStep, read_image
from gem_terminal.provision import (
    PYTEST_COMMAND,
    SYSTEM_PYTHON,
    does_nothing,
    loopback_servers,
    missing_imports,
    provision_script,
    python_facts,
    python_pip_installs,
    remote_fetches,
    remote_urls,
    split_commands,
    starts_process,
)

__all__ = [
    "BASE_IMAGES",
    "BASE_WORKDIRS",
    "REWARD_FILES",
    "SkippedTask",
    "TerminalTask",
    "base_workdir",
    "image_python_version",
    "load_task",
    "load_tasks",
    "read_reward",
]

#: Base images whose OS the sandbox's host system directories stand in for: Terminal-Bench's own
#: (``ghcr.io/laude-institute/t-bench/NAME:TAG``) and the public Debian, Ubuntu and Python images.
BASE_IMAGES = ("ubuntu-24-04", "python-3-13", "debian", "ubuntu", "python")
#: ``FROM`` image (a regular expression over the whole name) -> the ``WORKDIR`` that image sets. Terminal-Bench's
#: base images work in ``/app``: a task built on one runs its lines before any ``WORKDIR`` of its own there
#: (``RUN echo x > ready``, ``COPY data .``), and its checker may stop when ``$PWD`` is ``/``.
BASE_WORKDIRS: tuple[tuple[str, str], ...] = ((r"ghcr\.io/laude-institute/t-bench/[\w.-]+(:[\w.-]+)?", "/app"),)
#: Harbor's verifier contract: the reward file ``tests/test.sh`` writes (the JSON one wins when both exist).
REWARD_FILES = ("/logs/verifier/reward.json", "/logs/verifier/reward.txt")
#: Where Terminal-Bench and Harbor put the tests for the checker.
TESTS_DIR = "/tests"

Backend = Literal["sandbox", "container"]


@dataclass(frozen=True)
class TerminalTask:
    """One loaded task, in either format.

    What every backend uses:
        name: The folder's name.
        path: The folder.
        format: ``"terminal-bench"`` (task.yaml) or ``"harbor"`` (task.toml).
        instruction: What the agent is asked to do.
        workdir: Where commands start (the Dockerfile's last ``WORKDIR``, compose ``working_dir`` or
            Harbor's ``[environment] workdir``; ``/app`` when none is set).
        env: The image's environment at its end (``ENV`` lines, compose ``environment``).
        solution: The reference solution as shell text, installs of what is present resolved
            (``provision.provision_script``); Harbor's files beside ``solve.sh`` are written first to
            ``/tmp/gem-solution``, where its ``/solution/`` paths then point.
        solution_files: Harbor's files beside ``solve.sh`` (``{relative path: bytes}``; a container
            backend may put them at ``/solution`` as Harbor does).
        checker: The checker as shell text, run with ``bash`` from ``/tests`` (the standard uv + pytest
            bootstrap replaced by the pytest at ``$GEM_PYTEST``).
        tests: Files written to ``/tests`` just before the checker runs: ``{relative path: bytes}``
            (shell scripts among them rewritten like the checker).
        reward: ``"exit-code"`` (Terminal-Bench: the checker exits 0) or ``"reward-file"`` (Harbor: the
            number the checker writes to one of :data:`REWARD_FILES`; its exit code is ignored).
        agent_timeout_s: ``max_agent_timeout_sec`` / ``[agent] timeout_sec``.
        test_timeout_s: ``max_test_timeout_sec`` / ``[verifier] timeout_sec``.
        difficulty, tags, metadata: As the task says (``metadata``: the rest of task.yaml / ``[metadata]``).

    What a container backend builds from:
        dockerfile: The task's Dockerfile as it is (``None``: the task names a prebuilt image or none).
        build_context: The folder the Dockerfile's ``COPY`` sources are relative to.
        compose_file: The task's docker-compose file, if any.
        compose_build: The main service's ``build:`` (``context``, ``dockerfile``, ``args``, ``target``).
        base_image: The last ``FROM`` image (variables substituted, ``--platform`` removed), or Harbor's
            ``docker_image``.
        platform: The ``FROM --platform`` value (``""``: none).
        python_version: The Python of a Python image (``python-3-13``: ``"3.13"``, ``python:3.12-slim``:
            ``"3.12"``); ``""`` for OS images, whose ``python3`` is the distribution's.
        python: The host interpreter that stands in for the image's Python in the sandbox (the system
            ``python3``, or the one ``pythons=`` names for ``python_version``).
        image: The Dockerfile as read (``gem_terminal.dockerfile.DockerImage``), or ``None``.
        checker_path: The checker as written (``run-tests.sh`` / ``tests/test.sh``).
        solution_path: The reference solution as written (``None``: a Harbor task without one, which
            Harbor allows; its ``solution`` is empty).
        build_timeout_s, cpus, memory_mb, storage_mb: Harbor's ``[environment]`` (``None``: unset).
        network: Harbor's network mode (``public``, ``no-network``, ``allowlist``); ``""`` for v1.

    What the no-daemon sandbox runs instead of a build:
        copies: ``(source file or folder, absolute destination)`` into the work dir (its layer).
        setup: Shell text per set-up step, in order (each ``cd``s into the step's ``WORKDIR`` and exports
            its ``ARG``s first; installs of what the host has resolved).
        setup_root: Per set-up step, whether it must run as root (it writes system folders such as
            ``/opt`` or ``/usr/local/bin``, adds users, or works in a folder outside the work dir): the
            Dockerfile runs it as root, so a backend must too (``EpisodeSandbox.run(..., root=True)``).
        sandbox_reason: Why the no-daemon sandbox cannot run the task (``""``: it can); a container
            backend ignores it.

    What a container backend adds to the task's image for the checker, and why it cannot run the task:
        checker_apt: Debian packages the checker (or a script under ``tests/``) installs at check time.
        checker_python: Python requirements it installs (pytest and its report plugins left out).
        checker_pytest: Whether it runs pytest (``$GEM_PYTEST`` must then hold one).
        container_reason: Why a container backend cannot run the task (``""``: it can); the sandbox
            ignores it. The agent's container has no network, so a reference solution that installs
            what the image does not is refused.
    """

    name: str
    path: Path
    instruction: str
    format: Literal["terminal-bench", "harbor"] = "terminal-bench"
    workdir: str = "/app"
    copies: tuple[tuple[str, str], ...] = ()
    setup: tuple[str, ...] = ()
    setup_root: tuple[bool, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    solution: str = ""
    solution_files: dict[str, bytes] = field(default_factory=dict)
    checker: str = ""
    tests: dict[str, bytes] = field(default_factory=dict)
    reward: Literal["exit-code", "reward-file"] = "exit-code"
    agent_timeout_s: float = 360.0
    test_timeout_s: float = 60.0
    difficulty: str = ""
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    dockerfile: Path | None = None
    build_context: Path | None = None
    compose_file: Path | None = None
    compose_build: dict[str, Any] = field(default_factory=dict)
    base_image: str = ""
    platform: str = ""
    python_version: str = ""
    python: str = SYSTEM_PYTHON
    image: DockerImage | None = None
    checker_path: Path | None = None
    solution_path: Path | None = None
    build_timeout_s: float | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    network: str = ""
    sandbox_reason: str = ""
    checker_apt: tuple[str, ...] = ()
    checker_python: tuple[str, ...] = ()
    checker_pytest: bool = False
    container_reason: str = ""

    @property
    def setup_needs_root(self) -> bool:
        """Whether any set-up step must run as root."""
        return any(self.setup_root)

    @property
    def checker_uses_as_agent(self) -> bool:
        """Whether the checker runs the agent's code through ``as-agent`` (gem's own tasks do).

        A checker written for a container does not: it runs the agent's code itself and, as root there,
        writes where it likes, so in the sandbox the agent's files are handed to it before it runs.
        """
        return b"as-agent" in self.checker.encode() or any(b"as-agent" in data for data in self.tests.values())


@dataclass(frozen=True)
class SkippedTask:
    """A task folder nothing here can run, and why (one line)."""

    name: str
    path: Path
    reason: str


class _Refused(Exception):
    """A reason no backend here can run the task."""


def load_task(
    path: Path, *, backend: Backend = "sandbox", pythons: Mapping[str, str] | None = None
) -> TerminalTask | SkippedTask:
    """Load one task folder (Terminal-Bench v1 or Harbor); never raises for what the folder holds.

    Args:
        path: The task's folder.
        backend: ``"sandbox"`` also refuses what only the no-daemon sandbox cannot run (the task's
            ``sandbox_reason``); ``"container"`` what only a container backend cannot (``container_reason``).
        pythons: Interpreters on this host that stand in for a Python image's (``{"3.13": "/opt/py313/bin/python3"}``)
            in the sandbox; without one of the image's version, the system ``python3`` must match it.

    Returns:
        The task, or a :class:`SkippedTask` with the reason.
    """
    path = Path(path)
    found = _load_any(path, dict(pythons or {}))
    if isinstance(found, SkippedTask):  # one line, whatever the parser's message held
        return SkippedTask(found.name, found.path, " ".join(found.reason.split()))
    if backend == "sandbox" and found.sandbox_reason:
        return SkippedTask(path.name, path, " ".join(found.sandbox_reason.split()))
    if backend == "container" and found.container_reason:
        return SkippedTask(path.name, path, " ".join(found.container_reason.split()))
    return found


def _load_any(path: Path, pythons: dict[str, str]) -> TerminalTask | SkippedTask:
    try:
        if (path / "task.toml").exists():
            task = _load_harbor(path, pythons)
        elif (path / "task.yaml").exists():
            task = _load_terminal_bench(path, pythons)
        else:
            return SkippedTask(path.name, path, "no task.yaml (Terminal-Bench) or task.toml (Harbor) in the folder")
    except _Refused as exc:
        return SkippedTask(path.name, path, str(exc))
    except DockerfileError as exc:
        return SkippedTask(path.name, path, f"cannot read the Dockerfile: {exc}")
    except (OSError, TypeError, ValueError, KeyError, AttributeError, IndexError, yaml.YAMLError) as exc:
        return SkippedTask(path.name, path, f"malformed task files: {type(exc).__name__}: {str(exc)[:200]}")
    return task


def load_tasks(
    folder: Path, *, backend: Backend = "sandbox", pythons: Mapping[str, str] | None = None
) -> tuple[list[TerminalTask], list[SkippedTask]]:
    """Every task under ``folder`` (subfolders with a task.yaml or task.toml), sorted by name, and those skipped."""
    loaded: list[TerminalTask] = []
    skipped: list[SkippedTask] = []
    for path in sorted(Path(folder).iterdir()):
        if path.is_dir() and ((path / "task.yaml").exists() or (path / "task.toml").exists()):
            item = load_task(path, backend=backend, pythons=pythons)
            (loaded if isinstance(item, TerminalTask) else skipped).append(item)  # type: ignore[arg-type]
    return loaded, skipped


def _seconds(value: Any, key: str, default: float) -> float:
    number = float(default if value is None else value)
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{key} must be a positive number of seconds, got {value!r}")
    return number


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# --- Terminal-Bench v1 -------------------------------------------------------------------------


#: Files only a Terminal-Bench v1 folder holds beside its task.yaml (one of them at least).
_TB_FILES = ("Dockerfile", "docker-compose.yaml", "docker-compose.yml", "solution.sh", "solution.yaml", "run-tests.sh")


def _load_terminal_bench(path: Path, pythons: dict[str, str]) -> TerminalTask:
    try:
        meta = yaml.safe_load(_text(path / "task.yaml")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise _Refused(f"task.yaml is not valid YAML: {str(exc)[:200]}") from exc
    if not isinstance(meta, dict):
        raise _Refused("task.yaml is not a mapping")
    instruction = meta.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise _Refused("task.yaml has no instruction")
    if not any((path / name).exists() for name in _TB_FILES):
        # Other harnesses name their task file task.yaml too (set-up scripts, reference/ folders); saying
        # so beats naming the first missing file, which reads as if one file were all it lacked.
        raise _Refused(
            "a task.yaml without any of Terminal-Bench v1's other files (Dockerfile, docker-compose.yaml,"
            " solution.sh or solution.yaml, run-tests.sh): not a Terminal-Bench v1 task folder"
        )
    compose_file = next((path / n for n in ("docker-compose.yaml", "docker-compose.yml") if (path / n).exists()), None)
    build = _compose(compose_file, path) if compose_file else _Build(path, path / "Dockerfile", {}, {}, "", "")
    fields = _image_fields(build, path, pythons)
    if (path / "solution.sh").exists():
        solution_path = path / "solution.sh"
        solution = _text(solution_path)
    elif (path / "solution.yaml").exists():
        solution_path = path / "solution.yaml"
        steps = yaml.safe_load(_text(solution_path)) or []
        if not isinstance(steps, list):
            raise _Refused("solution.yaml is not a list of steps")
        solution = "\n".join(str(step["command"]) if isinstance(step, dict) else str(step) for step in steps)
    else:
        raise _Refused("no reference solution (solution.sh or solution.yaml)")
    tests = _tests(path / "tests")
    if (path / "run-tests.sh").exists():
        checker_path: Path | None = path / "run-tests.sh"
        checker = _text(path / "run-tests.sh")
    elif "test_outputs.py" in tests:
        # Terminal-Bench's default when a task has no run-tests.sh: pytest on tests/test_outputs.py.
        checker_path, checker = None, "pytest $TEST_DIR/test_outputs.py -rA\n"
    else:
        raise _Refused("no checker (run-tests.sh or tests/test_outputs.py)")
    tags = meta.get("tags") or ()
    known = {"instruction", "max_agent_timeout_sec", "max_test_timeout_sec", "difficulty", "tags"}
    return _finish(
        path,
        fields,
        format="terminal-bench",
        instruction=instruction.strip(),
        solution=solution,
        solution_path=solution_path,
        solution_files={},
        checker=checker,
        checker_path=checker_path,
        tests=tests,
        reward="exit-code",
        agent_timeout_s=_seconds(meta.get("max_agent_timeout_sec"), "max_agent_timeout_sec", 360.0),
        test_timeout_s=_seconds(meta.get("max_test_timeout_sec"), "max_test_timeout_sec", 60.0),
        difficulty=str(meta.get("difficulty", "")),
        tags=tuple(str(t) for t in tags) if isinstance(tags, list | tuple) else (),
        metadata={k: v for k, v in meta.items() if k not in known},
    )


# --- Harbor ------------------------------------------------------------------------------------


def _load_harbor(path: Path, pythons: dict[str, str]) -> TerminalTask:
    try:
        import tomllib
    except ModuleNotFoundError as exc:  # Python 3.10
        raise _Refused("reading task.toml needs Python 3.11 or later (tomllib)") from exc
    try:
        config = tomllib.loads(_text(path / "task.toml"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise _Refused(f"task.toml is not valid TOML: {str(exc)[:200]}") from exc
    steps = config.get("steps") or (
        [p for p in (path / "steps").iterdir() if p.is_dir()] if (path / "steps").is_dir() else []
    )
    if steps:
        raise _Refused(f"a multi-step Harbor task ({len(steps)} steps): gem plays one instruction per episode")
    if not (path / "instruction.md").exists():
        raise _Refused("a Harbor task without instruction.md")
    instruction = _text(path / "instruction.md").strip()
    if not instruction:
        raise _Refused("instruction.md is empty")
    environment = _table(config, "environment")
    verifier, agent, metadata = _table(config, "verifier"), _table(config, "agent"), _table(config, "metadata")
    if str(environment.get("os", "linux")).lower() != "linux":
        raise _Refused(f"needs a {environment['os']} container")
    gpus = environment.get("gpus") or 0
    if gpus or environment.get("gpu_types") or environment.get("tpu"):
        raise _Refused(f"needs a GPU ({gpus or 'any'}: [environment] gpus/gpu_types) or TPU; none here")
    if environment.get("mcp_servers"):
        raise _Refused("needs MCP servers ([environment] mcp_servers)")
    # `${VAR}` is resolved from the host at run time (an API key, typically); `${VAR:-default}` has a default.
    host_vars = sorted({m for v in (environment.get("env") or {}).values() for m in re.findall(r"\$\{(\w+)\}", str(v))})
    if host_vars:
        raise _Refused(f"needs the host's {', '.join(host_vars)} at run time ([environment] env)")
    env_dir = path / "environment"
    compose_file = next(
        (env_dir / n for n in ("docker-compose.yaml", "docker-compose.yml") if (env_dir / n).exists()), None
    )
    build = _compose(compose_file, env_dir) if compose_file else _Build(env_dir, env_dir / "Dockerfile", {}, {}, "", "")
    docker_image = str(environment.get("docker_image") or "")
    if not build.dockerfile.exists():
        if not docker_image:
            raise _Refused("no environment/Dockerfile and no [environment] docker_image")
        build = _Build(build.context, build.dockerfile, build.compose, build.env, build.workdir, docker_image)
    fields = _image_fields(build, path, pythons)
    if environment.get("workdir"):
        fields["workdir"] = str(environment["workdir"])
    if not (path / "tests" / "test.sh").exists():
        raise _Refused("no tests/test.sh (Harbor's verifier)")
    # Harbor makes the reference solution optional (only its oracle agent needs one): such a task plays,
    # with an empty `solution` (its reference run is a no-op).
    solution_path: Path | None = path / "solution" / "solve.sh"
    if solution_path is not None and not solution_path.exists():
        solution_path = None
    solution_files = {rel: data for rel, data in _tests(path / "solution").items() if rel != "solve.sh"}
    tests = _tests(path / "tests")
    network = str(environment.get("network_mode") or "")
    if not network and environment.get("allow_internet") is not None:
        network = "public" if environment["allow_internet"] else "no-network"
    tags = metadata.get("tags") or ()
    return _finish(
        path,
        fields,
        format="harbor",
        instruction=instruction,
        solution=_text(solution_path) if solution_path else "",
        solution_path=solution_path,
        solution_files=solution_files,
        checker=_text(path / "tests" / "test.sh"),
        checker_path=path / "tests" / "test.sh",
        tests=tests,
        reward="reward-file",
        agent_timeout_s=_seconds(agent.get("timeout_sec"), "[agent] timeout_sec", 600.0),
        test_timeout_s=_seconds(verifier.get("timeout_sec"), "[verifier] timeout_sec", 600.0),
        difficulty=str(metadata.get("difficulty", "")),
        tags=tuple(str(t) for t in tags) if isinstance(tags, list | tuple) else (),
        metadata={"version": config.get("version", config.get("schema_version", "")), **metadata},
        build_timeout_s=_seconds(environment.get("build_timeout_sec"), "[environment] build_timeout_sec", 600.0),
        cpus=float(environment["cpus"]) if environment.get("cpus") is not None else None,
        memory_mb=_megabytes(environment, "memory"),
        storage_mb=_megabytes(environment, "storage"),
        network=network or "public",
    )


def _table(config: dict[str, Any], key: str) -> dict[str, Any]:
    value = config.get(key) or {}
    if not isinstance(value, dict):
        raise _Refused(f"task.toml's [{key}] is not a table")
    return value


def _megabytes(environment: dict[str, Any], key: str) -> int | None:
    """``memory_mb``/``storage_mb``, or the older ``memory = "4G"`` / ``storage = "10G"`` (Harbor reads both)."""
    if environment.get(f"{key}_mb") is not None:
        return int(environment[f"{key}_mb"])
    value = environment.get(key)
    if value is None:
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([GMK])\s*", str(value).upper())
    if not match:
        raise ValueError(f"[environment] {key} = {value!r}: expected a size such as '4G' or '512M'")
    scale = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}[match.group(2)]
    return int(float(match.group(1)) * scale)


# --- The image: compose, Dockerfile, what the sandbox does instead -----------------------------


@dataclass(frozen=True)
class _Build:
    context: Path
    dockerfile: Path
    compose: dict[str, Any]
    env: dict[str, str]
    workdir: str
    prebuilt: str


def _compose(compose_file: Path, folder: Path) -> _Build:
    """The main service's build (Terminal-Bench's ``client``, Harbor's ``main``, else the only one)."""
    try:
        spec = yaml.safe_load(_text(compose_file)) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise _Refused(f"{compose_file.name} is not valid YAML: {str(exc)[:200]}") from exc
    services = (spec.get("services") if isinstance(spec, dict) else None) or {}
    if not isinstance(services, dict) or not services:
        raise _Refused(f"{compose_file.name} has no services")
    if len(services) > 1:
        raise _Refused(f"needs {len(services)} containers ({', '.join(map(str, services))}); gem runs one per episode")
    name, service = next(iter(services.items()))
    if not isinstance(service, dict):
        raise _Refused(f"{compose_file.name}: service {name!r} is not a mapping")
    devices = str((service.get("deploy") or {}).get("resources", {}).get("reservations", {}).get("devices", ""))
    if "gpu" in devices.lower() or "nvidia" in devices.lower() or service.get("runtime") == "nvidia":
        raise _Refused(f"needs a GPU (service {name!r} reserves one); none here")
    if service.get("privileged") or service.get("cap_add"):
        raise _Refused(f"needs a privileged container (service {name!r}: privileged/cap_add)")
    build = service.get("build")
    info: dict[str, Any] = {}
    if isinstance(build, str):
        info = {"context": build}
    elif isinstance(build, dict):
        info = {k: build[k] for k in ("context", "dockerfile", "args", "target") if k in build}
    context = (folder / str(info.get("context", "."))).resolve()
    if not context.is_dir():
        raise _Refused(f"{compose_file.name}: the build context {info.get('context')!r} is not a folder of the task")
    dockerfile = context / str(info.get("dockerfile", "Dockerfile"))
    image = str(service.get("image") or "")
    prebuilt = "" if build is not None or "${" in image else image
    env: dict[str, str] = {}
    raw_env = service.get("environment") or {}
    items = raw_env.items() if isinstance(raw_env, dict) else (str(e).partition("=")[::2] for e in raw_env)
    for key, value in items:
        if str(key) == "TEST_DIR" or "${" in str(value):  # Terminal-Bench's template variables: the harness's
            continue
        env[str(key)] = "" if value is None else str(value)
    return _Build(context, dockerfile, info, env, str(service.get("working_dir") or ""), prebuilt)


def image_python_version(image: str) -> str:
    """The Python version a Python image provides (``python-3-13`` -> ``3.13``, ``python:3.12-slim`` -> ``3.12``).

    ``""`` for other images (an OS image's ``python3`` is its distribution's, not named by the image).
    """
    last = image.rsplit("/", 1)[-1]
    match = re.fullmatch(r"python-(\d+)-(\d+)(?::.*)?", last) or re.fullmatch(r"python:(\d+)\.(\d+)[^/]*", last)
    return f"{match.group(1)}.{match.group(2)}" if match else ""


def base_workdir(image: str) -> str:
    """The ``WORKDIR`` a ``FROM`` image sets, from :data:`BASE_WORKDIRS` (``""``: none known, so ``/``)."""
    return next((workdir for pattern, workdir in BASE_WORKDIRS if re.fullmatch(pattern, image)), "")


def _is_base_os(image: str) -> bool:
    """Whether an image is a base OS the host's system directories stand in for (any ``python-X-Y`` too)."""
    name = image.rsplit("/", 1)[-1].split(":")[0].split("@")[0]
    return name in BASE_IMAGES or re.fullmatch(r"python-\d+-\d+", name) is not None


def _image_fields(build: _Build, task_path: Path, pythons: dict[str, str]) -> dict[str, Any]:
    """The image facts (for a container backend) and their sandbox translation (layer, set-up, root)."""
    fields: dict[str, Any] = {
        "build_context": build.context,
        "compose_file": None,
        "compose_build": dict(build.compose),
        "dockerfile": None,
        "image": None,
        "python": SYSTEM_PYTHON,
    }
    reasons: list[str] = []
    if not build.dockerfile.exists():
        if build.prebuilt:
            version = image_python_version(build.prebuilt)
            fields.update(base_image=build.prebuilt, python_version=version, python=pythons.get(version, SYSTEM_PYTHON))
            fields["workdir"] = build.workdir or "/app"
            fields["env"] = dict(build.env)
            if not _is_base_os(build.prebuilt):
                reasons.append(f"runs the prebuilt image {build.prebuilt!r}; the sandbox provides only a base OS")
        else:
            fields["workdir"] = build.workdir or "/app"
            fields["env"] = dict(build.env)
            fields["container_reasons"] = ["no Dockerfile and no prebuilt image: nothing to build its container from"]
        fields["sandbox_reasons"] = reasons
        fields["copies"], fields["setup"], fields["setup_root"] = (), (), ()
        fields["image_installs"] = frozenset()
        fields["image_project_installs"] = ()
        return fields
    args = {str(k): str(v) for k, v in (build.compose.get("args") or {}).items()}
    image = read_image(_text(build.dockerfile), args, base_workdir)
    workdir = build.workdir or image.workdir or "/app"
    fields.update(
        dockerfile=build.dockerfile,
        image=image,
        base_image=image.base_image,
        platform=image.platform,
        python_version=image_python_version(image.base_image),
        python=pythons.get(image_python_version(image.base_image), SYSTEM_PYTHON),
        workdir=workdir,
        env={**image.env, **build.env},
    )
    if not _is_base_os(image.base_image):
        reasons.append(
            f"needs the image {image.base_image!r}; the sandbox provides only a base OS (one of {BASE_IMAGES})"
        )
    if image.stages > 1 or any(isinstance(s, CopyStep) and s.from_stage for s in image.steps):
        reasons.append("a multi-stage build (several FROM lines or COPY --from)")
    copies: list[tuple[str, str]] = []
    setup: list[str] = []
    setup_root: list[bool] = []
    installed: set[str] = set()
    project: list[str] = []
    for step in image.steps:
        if isinstance(step, RunStep):
            done = provision_script(
                step.command,
                checker=False,
                read_file=lambda p: _context_file(build.context, p),
                python=fields["python"],
            )
            installed.update(_requirement_name(n) for n in (*done.apt_installs, *done.python_installs))
            project.extend(done.project_installs)
            if done.downloads:
                raise _Refused(f"its image build downloads ({done.downloads[0][:80]!r}); no network here")
            if done.missing:
                reasons.append(f"its image installs {done.missing[0]}, which this host lacks (no package manager)")
            if does_nothing(done.text):
                continue  # installs of what is here, index bookkeeping
            setup.append(_setup_text(done.text, step.workdir, step.env))
            setup_root.append(_needs_root(done.text, step, workdir))
            continue
        copies_or_setup = _copy(step, build.context, workdir)
        if isinstance(copies_or_setup, str):
            reasons.append(copies_or_setup)
        elif copies_or_setup and isinstance(copies_or_setup[0], tuple):
            copies.extend(copies_or_setup)  # type: ignore[arg-type]
        elif copies_or_setup:
            text, root = copies_or_setup  # type: ignore[misc]
            setup.append(text)
            setup_root.append(root)
    fields.update(copies=tuple(copies), setup=tuple(setup), setup_root=tuple(setup_root), sandbox_reasons=reasons)
    fields["image_installs"] = frozenset(installed)
    fields["image_project_installs"] = tuple(dict.fromkeys(project))
    return fields


def _requirement_name(requirement: str) -> str:
    """A package's bare name (``numpy==1.26`` -> ``numpy``, ``jq:amd64`` -> ``jq``), lower case, ``-`` for ``_``."""
    return re.split(r"[=<>~!\[ ;:@]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _context_file(context: Path, image_path: str) -> str | None:
    """A file a RUN line names by its path in the image, found by name in the build context (``None``: not there)."""
    name = posixpath.basename(image_path)
    found = sorted(context.rglob(name)) if name else []
    try:
        return _text(found[0]) if found else None
    except (OSError, UnicodeDecodeError):
        return None


def _setup_text(command: str, workdir: str, variables: dict[str, str]) -> str:
    """A set-up step as self-contained shell text: its ARG/ENV exported, in its WORKDIR (made if missing)."""
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in variables.items() if re.fullmatch(r"\w+", k))
    return f"{exports}mkdir -p {shlex.quote(workdir)} && cd {shlex.quote(workdir)} || exit 1\n{command}"


_SYSTEM = re.compile(r"^/(?:opt|usr|etc|var|srv|root|lib|lib32|lib64|bin|sbin|mnt|media|boot|home/(?!agent\b))(?:/|$)")
_ROOT_COMMANDS = {
    "useradd", "groupadd", "adduser", "addgroup", "usermod", "chpasswd", "update-alternatives", "ldconfig",
    "locale-gen", "update-ca-certificates", "systemctl", "service", "setcap", "visudo",
}  # fmt: skip
_WRITERS = {
    "cp",
    "mv",
    "ln",
    "install",
    "mkdir",
    "touch",
    "chmod",
    "chown",
    "chgrp",
    "rm",
    "tee",
    "sed",
    "unzip",
    "tar",
}


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _writable_here(folder: str, workdir: str) -> bool:
    """Whether the agent may write ``folder`` in the sandbox: its work dir (unless that is ``/``), /tmp, its home."""
    return any(_inside(folder, root) for root in (workdir, "/tmp", "/home/agent") if root != "/")


def _needs_root(command: str, step: RunStep, workdir: str) -> bool:
    """Whether a RUN step writes where only root may (system folders, users) or works outside the work dir.

    Docker runs every RUN as root unless ``USER`` says otherwise; the sandbox runs set-up as the agent
    unless told this, so a step that needs root says so (a read of ``/usr`` does not count). Relative
    paths are read from the step's folder, followed through its ``cd`` lines; where that folder cannot be
    told (``cd "$X"``, a subshell), relative paths are not judged.
    """
    if step.user not in ("", "root", "0"):
        return False
    if step.workdir != "/" and not _writable_here(step.workdir, workdir):
        return True  # it works in a folder only root can create (``/`` itself is where a RUN starts, not a target)
    cwd: str | None = step.workdir
    for _, segment in split_commands(command):  # a heredoc's body is data, not a segment
        tokens = _shell_tokens(segment)
        if tokens is None:
            continue
        for words in _pipeline_stages(tokens):
            head = words[0].rsplit("/", 1)[-1] if words else ""
            if head in ("cd", "pushd", "popd"):
                cwd = _changed_dir(cwd, words[1:] if head != "popd" else ["-"], in_subshell=segment.lstrip()[:1] == "(")
                continue
            paths = [_absolute(t, cwd) for t in _redirect_targets(words)]
            plain = _without_redirections(words)
            if head in _ROOT_COMMANDS:
                return True
            venv = _venv_folder(head, plain)
            if venv is not None:
                paths.append(_absolute(venv, cwd))
            if head in _WRITERS:
                targets = [w for w in plain[1:] if not w.startswith("-")]
                if head in ("cp", "mv", "ln", "install"):
                    targets = targets[-1:]
                if any(_SYSTEM.match(t) and not _inside(t, workdir) for t in targets):
                    return True
                # Those that take only paths: a new folder or file at the top (/data, /tests) is root's to make too.
                if head in _PATH_WRITERS:
                    paths.extend(_absolute(t, cwd) for t in targets)
            if any(path is not None and _root_only(path, workdir) for path in paths):
                return True
    return False


_REDIRECTIONS = frozenset({">", ">>", "&>", "&>>", ">|", ">&", "<", "<<", "<<-", "<<<", "<&", "<>"})


def _shell_tokens(segment: str) -> list[str] | None:
    """A command's words with redirections and pipes as tokens of their own (``None``: unbalanced quotes)."""
    lexer = shlex.shlex(segment, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:
        return None


def _pipeline_stages(tokens: list[str]) -> list[list[str]]:
    """The commands of a pipeline (``a | tee x``), each without the parentheses of a subshell."""
    stages: list[list[str]] = [[]]
    for token in tokens:
        if token in ("|", "|&", "&", ";"):
            stages.append([])
        elif token not in ("(", ")"):
            stages[-1].append(token)
    return [stage for stage in stages if stage]


def _without_redirections(words: list[str]) -> list[str]:
    """A command's words without its redirections (``2>/dev/null``: the fd, the operator, the file)."""
    kept: list[str] = []
    skip = False
    for index, word in enumerate(words):
        if skip:
            skip = False
        elif word in _REDIRECTIONS:
            skip = True
        elif word.isdigit() and index + 1 < len(words) and words[index + 1] in _REDIRECTIONS:
            continue
        else:
            kept.append(word)
    return kept


def _redirect_targets(words: list[str]) -> list[str]:
    """The files a command's output redirections and ``tee`` write (``2>&1``'s ``1`` is no file)."""
    targets = [words[i + 1] for i, w in enumerate(words[:-1]) if w in (">", ">>", "&>", "&>>", ">|", "<>")]
    if words and words[0].rsplit("/", 1)[-1] == "tee":
        targets.extend(w for w in words[1:] if not w.startswith("-") and w not in _REDIRECTIONS)
    return targets


def _changed_dir(cwd: str | None, args: list[str], *, in_subshell: bool) -> str | None:
    """The folder after ``cd ARGS`` from ``cwd``; ``None`` when it cannot be told (a variable, ``-``, no operand)."""
    operands = [a for a in args if not a.startswith("-") or a == "-"]
    if in_subshell or len(operands) != 1 or re.search(r"[$`~*?]", operands[0]) or operands[0] == "-":
        return None
    return _absolute(operands[0], cwd)


def _absolute(path: str, cwd: str | None) -> str | None:
    """``path`` made absolute from ``cwd``; ``None`` when it names a variable's folder or ``cwd`` is unknown."""
    if path.startswith("/"):
        return posixpath.normpath(path)
    if cwd is None or re.match(r"[$`~]", path):
        return None
    return posixpath.normpath(posixpath.join(cwd, path))


def _venv_folder(head: str, words: list[str]) -> str | None:
    """The folder ``python3 -m venv DIR`` makes, else ``None``: a verifier's venv in ``/opt`` is root's to make.

    Set-up text is provisioned first, where ``uv venv DIR`` and ``virtualenv DIR`` became that command.
    """
    if not (re.fullmatch(r"python[\d.]*", head) and words[1:3] == ["-m", "venv"]):
        return None
    operands = [word for word in words[3:] if not word.startswith("-")]
    return operands[-1] if operands else None


#: Writers whose operands are all paths (sed's, tar's, chmod's may be scripts, archives or modes).
_PATH_WRITERS = frozenset({"cp", "mv", "ln", "install", "mkdir", "touch", "rm", "tee"})


def _root_only(path: str, workdir: str) -> bool:
    """Whether an absolute path is one only root may write.

    Anything outside the work dir, ``/tmp`` and ``/home/agent``: a system folder, a folder at the top
    (``/data`` is root's to make); a work dir under a system folder (``/srv/app``) is the agent's all the
    same. Devices and ``/proc`` are written through, not created.
    """
    if not path.startswith("/") or re.match(r"^/(?:dev|proc)(?:/|$)", path):
        return False
    return not _writable_here(posixpath.normpath(path), workdir)


def _copy(step: CopyStep, context: Path, workdir: str) -> list[tuple[str, str]] | tuple[str, bool] | str:
    """A COPY/ADD for the sandbox: layer entries, a set-up step writing a heredoc, or the reason it cannot."""
    if step.inline is not None:
        folder = posixpath.dirname(step.dest.rstrip("/")) or "/"
        data = base64.b64encode(step.inline.encode()).decode()
        text = f"mkdir -p {shlex.quote(folder)} && printf %s {shlex.quote(data)} | base64 -d > {shlex.quote(step.dest)}"
        if step.chmod:
            text += f" && chmod {shlex.quote(step.chmod)} {shlex.quote(step.dest)}"
        return text, not _writable_here(folder, workdir)
    if step.from_stage:
        return []  # reported as a multi-stage build
    entries: list[tuple[str, str]] = []
    root = context.resolve()
    for source in step.sources:
        if step.add and re.match(r"^[a-z]+://", source):
            raise _Refused(f"its image build downloads {source!r} (ADD of a URL); no network here")
        matches = sorted(glob.glob(str(root / source))) if glob.has_magic(source) else [str(root / source)]
        if not matches or not all(os.path.exists(m) for m in matches):
            raise _Refused(f"line {step.line}: COPY source {source!r} is not in the build context {root}")
        for match in matches:
            resolved = Path(match).resolve()
            if resolved != root and root not in resolved.parents:
                raise _Refused(f"line {step.line}: COPY source {source!r} leaves the build context")
            if step.add and resolved.is_file() and re.search(r"\.(?:tar|tgz|tar\.\w+|txz|tbz2?)$", resolved.name):
                return f"ADD unpacks the archive {source!r} (line {step.line}); the sandbox copies files only"
            dest = step.dest
            several = len(step.sources) > 1 or len(matches) > 1
            if resolved.is_file() and (dest.endswith("/") or several):
                dest = posixpath.join(dest, resolved.name)
            dest = dest.rstrip("/") or "/"
            if not _writable_here(dest, workdir) or not (dest == workdir or dest.startswith(workdir.rstrip("/") + "/")):
                return f"copies into {dest} (line {step.line}), outside the work dir {workdir} (the sandbox's layer)"
            entries.append((str(resolved), dest))
    return entries


def _tests(folder: Path) -> dict[str, bytes]:
    if not folder.is_dir():
        return {}
    return {
        str(file.relative_to(folder)): file.read_bytes()
        for file in sorted(folder.rglob("*"))
        if file.is_file() and "__pycache__" not in file.parts
    }


# --- Putting it together -----------------------------------------------------------------------


def _finish(path: Path, fields: dict[str, Any], **given: Any) -> TerminalTask:
    """Resolve the checker and solution against this host and build the task (or refuse it)."""
    reasons: list[str] = fields.pop("sandbox_reasons")
    image_installs: frozenset[str] = fields.pop("image_installs")
    image_project_installs: tuple[str, ...] = fields.pop("image_project_installs")
    container_reasons: list[str] = fields.pop("container_reasons", [])
    solution_files: dict[str, bytes] = given["solution_files"]
    python = fields["python"]
    checker = provision_script(given["checker"], checker=True, python=python)
    if checker.downloads:
        raise _Refused(f"its checker downloads at run time ({checker.downloads[0][:80]!r}); no network here")
    tests = dict(given["tests"])
    for relative, data in tests.items():
        if relative.endswith(".sh"):
            script = provision_script(data.decode("utf-8", "replace"), checker=True, python=python)
            if script.downloads:
                raise _Refused(
                    f"tests/{relative} downloads at run time ({script.downloads[0][:80]!r}); no network here"
                )
            reasons.extend(f"its checker needs {m}, which this host lacks" for m in script.missing)
            tests[relative] = script.text.encode()
    reasons.extend(f"its checker needs {m}, which this host lacks" for m in checker.missing)
    for argument in checker.pytest_args:  # the tests the checker runs must be among the task's tests
        match = re.match(r"^(?:\$TEST_DIR|\$\{TEST_DIR\}|/tests)/([^*?\[]+?)(?:::.*)?$", argument)
        if match and not any(
            rel == match.group(1) or rel.startswith(match.group(1).rstrip("/") + "/") for rel in tests
        ):
            raise _Refused(f"its checker runs tests/{match.group(1)}, which the task does not have")
    if given["solution"].strip() and does_nothing(given["solution"]):
        # Comments alone: a template never filled in (polyglot-rust-c's). Harbor's solution is optional
        # (a task without one trains all the same); Terminal-Bench v1 requires one.
        if given["format"] != "harbor":
            raise _Refused("its reference solution runs no command, so nothing shows the task can be solved")
        given["solution"] = ""
    if solution_files:
        given["solution"] = _with_solution_files(given["solution"], solution_files)
    solution = provision_script(given["solution"], checker=False, python=python)
    if solution.downloads:
        raise _Refused(
            f"its reference solution downloads at run time ({solution.downloads[0][:80]!r}); no network here"
        )
    reasons.extend(f"its reference solution installs {m}, which this host lacks" for m in solution.missing)
    # The agent's container has no network: what the solution installs must come with the image.
    lacking = [
        name
        for name in (*solution.apt_installs, *solution.python_installs)
        if _requirement_name(name) not in image_installs | _IMAGE_TOOLS
    ]
    if lacking:
        container_reasons.append(
            f"its reference solution installs {', '.join(lacking[:3])} at run time, which its image does not;"
            " the agent's container has no network"
        )
    checker_apt = [*checker.apt_installs]
    checker_python = [*checker.python_installs]
    for relative, data in given["tests"].items():
        if relative.endswith(".sh"):
            script = provision_script(data.decode("utf-8", "replace"), checker=True, python=python)
            checker_apt += script.apt_installs
            checker_python += script.python_installs
    runs_pytest = checker.ran_pytest or any(
        r.endswith(".sh") and PYTEST_COMMAND.encode() in d for r, d in tests.items()
    )
    if runs_pytest:
        # `uv run pytest` ran in the uv project the image made (`uv add numpy` at build): gem's pytest runs
        # on the image's python3 instead, so the checker's tools get that project's packages.
        checker_python += image_project_installs
    python_tests = {rel: data.decode("utf-8", "replace") for rel, data in tests.items() if rel.endswith(".py")}
    for relative, text in python_tests.items():
        urls = remote_urls(text)
        if urls:
            raise _Refused(f"tests/{relative} reaches {urls[0][:80]} at check time; no network here")
        # A shell command in a Python test (os.popen, subprocess): a shell script's are read as downloads.
        fetched = remote_fetches(text)
        if fetched:
            raise _Refused(f"tests/{relative} fetches {fetched[0][:80]} at check time; no network here")
        # pip run by a test itself (``subprocess.run([sys.executable, "-m", "pip", "install", ...])``) reaches
        # an index unless the image has the package already.
        lacking = [n for n in python_pip_installs(text) if _requirement_name(n) not in image_installs | _IMAGE_TOOLS]
        if lacking:
            raise _Refused(
                f"tests/{relative} installs {', '.join(lacking[:3])} at check time, which its image does not;"
                " no network here"
            )
    # Every process of the agent ends before the check (so none can forge it): a server the agent was to
    # leave running is gone by then, unless the tests start one themselves or a gem-probe.sh observes it.
    scripts = [given["checker"], *(d.decode("utf-8", "replace") for r, d in given["tests"].items() if r[-3:] != ".py")]
    if "gem-probe.sh" not in tests and not any(starts_process(t) for t in (*python_tests.values(), *scripts)):
        for relative, text in python_tests.items():
            servers = loopback_servers(text)
            if servers:
                raise _Refused(
                    f"tests/{relative} queries {servers[0][:60]}, a server the agent must leave running; every"
                    " process of the agent ends before the check (none can forge it) and no tests/gem-probe.sh"
                    " observes it first"
                )
    if checker.ran_pytest or any(rel.startswith("test") for rel in python_tests):
        reasons.extend(
            f"its tests import {name}, which this host's python3 lacks"
            for name in missing_imports(python_tests, _task_modules(path), python)
        )
    if checker.ran_pytest and not _pytest_here():
        reasons.append("its checker runs pytest, which is not installed beside gem-terminal")
    have = python_facts(python)[0]
    want = fields.get("python_version", "")
    if want and want != have:
        reasons.append(
            f"its image provides Python {want}; the sandbox has {python} (Python {have or 'not runnable'})"
            f" and no stand-in for {want} (TerminalEnv(pythons={{{want!r}: ...}}))"
        )
    if any(fields.get("setup_root", ())) and not _sandbox_runs_root():
        step = fields["setup"][list(fields["setup_root"]).index(True)]
        reasons.append(f"its set-up needs root ({step.splitlines()[-1][:60]!r}); the sandbox runs set-up unprivileged")
    given.update(
        checker=checker.text,
        tests=tests,
        solution=_as_script_file(solution.text)
        if given["format"] == "harbor" and solution.text.strip()
        else solution.text,
        checker_apt=tuple(dict.fromkeys(checker_apt)),
        checker_python=tuple(dict.fromkeys(checker_python)),
        checker_pytest=runs_pytest,
        container_reason=container_reasons[0] if container_reasons else "",
    )
    task = TerminalTask(name=path.name, path=path, **given, **fields)
    return _with_reason(task, reasons[0] if reasons else "")


#: Packages every image a container backend runs has (the image map's stand-ins and Terminal-Bench's
#: own images), and installers whose install is no tool: a solution may "install" them offline.
_IMAGE_TOOLS = frozenset(
    {"python3", "python3-pip", "python3-venv", "python-is-python3", "tmux", "git", "curl", "procps",
     "ca-certificates", "pip", "uv", "setuptools", "wheel", "asciinema"}
)  # fmt: skip


#: Where a reference run finds the files beside ``solve.sh`` (Harbor mounts them at ``/solution``, which
#: the agent's uid cannot create in the sandbox).
SOLUTION_DIR_HERE = "/tmp/gem-solution"


def _with_solution_files(solve: str, files: dict[str, bytes]) -> str:
    """``solve.sh`` after writing the files beside it to :data:`SOLUTION_DIR_HERE` (its ``/solution`` paths there)."""
    lines = []
    for relative, data in sorted(files.items()):
        target = posixpath.join(SOLUTION_DIR_HERE, relative)
        encoded = base64.b64encode(data).decode()
        lines.append(
            f"mkdir -p {shlex.quote(posixpath.dirname(target))} && "
            f"printf %s {shlex.quote(encoded)} | base64 -d > {shlex.quote(target)}"
        )
    body = re.sub(r"(?<![\w.-])/solution(?=/|\b)", SOLUTION_DIR_HERE, solve)
    return "\n".join(lines) + "\n" + body


def _as_script_file(solve: str) -> str:
    """A reply that writes ``solve`` to ``solve.sh`` in :data:`SOLUTION_DIR_HERE` and runs that file with bash.

    Harbor runs ``bash /solution/solve.sh``: a solution that finds the files beside it through its own path
    (``$(dirname "${BASH_SOURCE[0]}")``, ``$0``) finds them there, where a ``bash -c`` of its text finds the
    work dir. The text stays readable in the reply (a quoted here-document, written as is).
    """
    delimiter = "GEM_SOLVE_SH"
    while delimiter in solve.splitlines():
        delimiter += "_"
    target = f"{SOLUTION_DIR_HERE}/solve.sh"
    return (
        f"mkdir -p {SOLUTION_DIR_HERE} && cat > {target} <<'{delimiter}'\n{solve.rstrip(chr(10))}\n{delimiter}\n"
        f"bash {target}"
    )


def _task_modules(path: Path, limit: int = 5000) -> frozenset[str]:
    """Names of Python modules and packages anywhere in the task's folder (the agent's code under test)."""
    names: set[str] = set()
    for count, file in enumerate(path.rglob("*.py")):
        if count >= limit:
            break
        names.add(file.stem)
        names.update(part for part in file.relative_to(path).parts[:-1])
    return frozenset(names)


def _with_reason(task: TerminalTask, reason: str) -> TerminalTask:
    import dataclasses

    return dataclasses.replace(task, sandbox_reason=reason)


def _pytest_here() -> bool:
    """Whether checkers can get pytest: importable here (the env binds a copy) and a system python3 to run it."""
    import importlib.util

    return importlib.util.find_spec("pytest") is not None and os.path.exists("/usr/bin/python3")


def _sandbox_runs_root() -> bool:
    """Whether the episode sandbox can run a set-up step as root (``EpisodeSandbox.run(..., root=True)``)."""
    import inspect

    try:
        from gem_tool_python.episode import EpisodeSandbox
    except ImportError:
        return False
    return "root" in inspect.signature(EpisodeSandbox.run).parameters


def read_reward(json_text: str, text: str) -> tuple[float, str]:
    """Harbor's verifier contract: the reward from ``reward.json`` (when not empty) else ``reward.txt``.

    ``reward.json`` holds one number or an object of named numbers (its ``reward`` entry counts, else
    the mean of its entries); ``reward.txt`` one number. Returns ``(reward, "")``, or ``(0.0, why)``
    when the file is missing, empty, not a number or not finite.
    """
    import json

    if json_text.strip():
        try:
            value = json.loads(json_text)
        except ValueError:
            return 0.0, "reward.json is not JSON"
        if isinstance(value, dict):
            numbers = value.get("reward", None) if "reward" in value else list(value.values())
        else:
            numbers = value
        items = numbers if isinstance(numbers, list) else [numbers]
        if not items or not all(isinstance(n, int | float) and not isinstance(n, bool) for n in items):
            return 0.0, "reward.json holds no number"
        result = sum(float(n) for n in items) / len(items)
    elif text.strip():
        try:
            result = float(text.strip())
        except ValueError:
            return 0.0, f"reward.txt is not a number ({text.strip()[:40]!r})"
    else:
        return 0.0, "the verifier wrote no reward file"
    if not math.isfinite(result):
        return 0.0, "the reward is not finite"
    return result, ""


#: Kept for callers of the previous loader.
_host_has_pytest = _pytest_here
