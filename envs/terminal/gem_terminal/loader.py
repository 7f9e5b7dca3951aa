"""Terminal tasks in Terminal-Bench's folder format, and which of them the episode sandbox can run.

A task is a folder::

    task.yaml        instruction (required); max_agent_timeout_sec, max_test_timeout_sec, difficulty, tags
    Dockerfile       FROM a Terminal-Bench base image; WORKDIR, ENV, COPY (files into the work dir), RUN (set-up)
    solution.sh      the reference solution (or solution.yaml: a list of {command: ...})
    run-tests.sh     the checker, run in the work dir with the tests at $TEST_DIR (/tests); exit 0 = solved
    tests/           files the checker needs (the agent never sees them)

The sandbox provides the host's system directories (bash, coreutils, git, make, gcc, python3), no
network and no package manager. A task whose image or set-up needs more is skipped with the reason
(:class:`SkippedTask`), never run half-prepared.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["BASE_IMAGES", "SkippedTask", "TerminalTask", "load_task", "load_tasks"]

#: Terminal-Bench's base images (``ghcr.io/laude-institute/t-bench/NAME:TAG``): an OS with a shell
#: and Python, which the sandbox's host system directories stand in for.
BASE_IMAGES = ("ubuntu-24-04", "python-3-13", "debian", "ubuntu")
#: Set-up or checker commands that need the network or a package manager.
_NEEDS_NETWORK = re.compile(r"\b(apt-get|apt|apk|yum|dnf|pip3?|uv|curl|wget|npm|conda|cargo)\b\s+\S|\bgit\s+clone\b")


@dataclass(frozen=True)
class TerminalTask:
    """One loaded task.

    Attributes:
        name: The folder's name.
        path: The folder.
        instruction: What the agent is asked to do.
        workdir: Where the task's files live and commands start (``WORKDIR``; ``/app`` by default).
        copies: ``(source in the folder, destination in the sandbox)`` from the Dockerfile's COPY lines.
        setup: Shell commands run at the start of every episode (the Dockerfile's RUN lines).
        env: Environment variables from the Dockerfile's ENV lines.
        solution: The reference solution, as shell text.
        checker: The checker, as shell text (``run-tests.sh``).
        tests: Files written to ``/tests`` before the checker runs: ``{relative path: bytes}``.
        agent_timeout_s: ``max_agent_timeout_sec``.
        test_timeout_s: ``max_test_timeout_sec``.
        difficulty: As the task says.
        tags: As the task says.
    """

    name: str
    path: Path
    instruction: str
    workdir: str = "/app"
    copies: tuple[tuple[str, str], ...] = ()
    setup: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    solution: str = ""
    checker: str = ""
    tests: dict[str, bytes] = field(default_factory=dict)
    agent_timeout_s: float = 600.0
    test_timeout_s: float = 60.0
    difficulty: str = ""
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class SkippedTask:
    """A task folder the sandbox cannot run, and why."""

    name: str
    path: Path
    reason: str


def _dockerfile(path: Path, task: dict[str, Any]) -> str | None:
    """Fill ``task`` from the Dockerfile; the reason it cannot run in the sandbox, or ``None``."""
    if not path.exists():
        return None
    lines = path.read_text().replace("\\\n", " ").splitlines()
    copies: list[tuple[str, str]] = []
    setup: list[str] = []
    env: dict[str, str] = {}
    workdir = "/app"
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":
            image = rest.split()[0].rsplit("/", 1)[-1].split(":")[0]
            if image not in BASE_IMAGES:
                return (
                    f"needs the image {rest.split()[0]!r}; the sandbox provides only a base OS (one of {BASE_IMAGES})"
                )
        elif keyword == "WORKDIR":
            workdir = rest if rest.startswith("/") else f"{workdir}/{rest}"
        elif keyword == "ENV":
            parts = shlex.split(rest)
            if len(parts) == 2 and "=" not in parts[0]:
                env[parts[0]] = parts[1]
            else:
                for part in parts:
                    key, equals, value = part.partition("=")
                    if equals:
                        env[key] = value
        elif keyword in ("COPY", "ADD"):
            args = [a for a in shlex.split(rest) if not a.startswith("--")]
            if len(args) < 2:
                return f"cannot read the Dockerfile line {line!r}"
            dest = args[-1] if args[-1].startswith("/") else f"{workdir}/{args[-1]}"
            if not (dest.rstrip("/") + "/").startswith(workdir.rstrip("/") + "/") and dest.rstrip("/") != workdir:
                return f"copies into {dest}, outside the work dir {workdir} (the sandbox's writable layer)"
            copies.extend((source, dest) for source in args[:-1])
        elif keyword == "RUN":
            if _NEEDS_NETWORK.search(rest):
                return f"its set-up installs packages or downloads ({rest[:80]!r}); the sandbox has no network"
            setup.append(rest)
        elif keyword in ("CMD", "ENTRYPOINT", "USER", "LABEL", "ARG", "SHELL", "EXPOSE"):
            continue
        else:
            return f"uses the Dockerfile instruction {keyword}, which the loader does not translate"
    task.update(copies=tuple(copies), setup=tuple(setup), env=env, workdir=workdir)
    return None


def load_task(path: Path) -> TerminalTask | SkippedTask:
    """Load one task folder; never raises for what the folder holds.

    Returns:
        The task, or a :class:`SkippedTask` saying why the sandbox cannot run it.
    """
    path = Path(path)
    try:
        return _load(path)
    except (OSError, TypeError, ValueError, KeyError, AttributeError, yaml.YAMLError) as exc:
        return SkippedTask(path.name, path, f"malformed task files: {type(exc).__name__}: {exc}")


def _seconds(meta: dict[str, Any], key: str, default: float) -> float:
    value = float(meta.get(key, default))
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{key} must be a positive number of seconds, got {meta.get(key)!r}")
    return value


def _load(path: Path) -> TerminalTask | SkippedTask:
    name = path.name
    meta_path = path / "task.yaml"
    if not meta_path.exists():
        return SkippedTask(name, path, "no task.yaml")
    try:
        meta = yaml.safe_load(meta_path.read_text()) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        return SkippedTask(name, path, f"task.yaml is not valid YAML: {exc}")
    if not isinstance(meta, dict):
        return SkippedTask(name, path, "task.yaml is not a mapping")
    instruction = meta.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        return SkippedTask(name, path, "task.yaml has no instruction")
    compose = path / "docker-compose.yaml"
    if compose.exists():
        try:
            spec = yaml.safe_load(compose.read_text()) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            return SkippedTask(name, path, f"docker-compose.yaml is not valid YAML: {exc}")
        services = (spec.get("services") if isinstance(spec, dict) else None) or {}
        if len(services) > 1:
            return SkippedTask(
                name, path, f"needs {len(services)} containers ({', '.join(services)}); the sandbox is one"
            )
    fields: dict[str, Any] = {}
    try:
        reason = _dockerfile(path / "Dockerfile", fields)
    except (ValueError, UnicodeDecodeError) as exc:  # shlex: unbalanced quotes
        reason = f"cannot read the Dockerfile: {exc}"
    if reason is not None:
        return SkippedTask(name, path, reason)
    if (path / "solution.sh").exists():
        solution = (path / "solution.sh").read_text()
    elif (path / "solution.yaml").exists():
        steps = yaml.safe_load((path / "solution.yaml").read_text()) or []
        solution = "\n".join(str(step["command"]) if isinstance(step, dict) else str(step) for step in steps)
    else:
        return SkippedTask(name, path, "no reference solution (solution.sh or solution.yaml)")
    tests_dir = path / "tests"
    tests = {
        str(file.relative_to(tests_dir)): file.read_bytes()
        for file in sorted(tests_dir.rglob("*"))
        if file.is_file() and "__pycache__" not in file.parts
    }
    if (path / "run-tests.sh").exists():
        checker = (path / "run-tests.sh").read_text()
        scripts = [("run-tests.sh", checker)]
        scripts += [
            (f"tests/{rel}", data.decode("utf-8", "replace")) for rel, data in tests.items() if rel.endswith(".sh")
        ]
        for script, text in scripts:
            if _NEEDS_NETWORK.search(text):
                return SkippedTask(name, path, f"{script} installs packages or downloads; the sandbox has no network")
    elif "test_outputs.py" in tests:
        # Terminal-Bench's default: pytest on test_outputs.py (the env binds pytest at $GEM_PYTEST).
        # Its verdict is the report pytest writes after the last test, not its exit status alone: code of the
        # agent's that a test imports and that exits 0 early (os._exit, an atexit hook) leaves no report.
        checker = (
            "PYTHONPATH=$GEM_PYTEST python3 -P -m pytest -q -p no:cacheprovider --junitxml=/checker/work/pytest.xml "
            '$TEST_DIR/test_outputs.py && python3 -I -c "import sys, xml.etree.ElementTree as T; '
            "r = T.parse('/checker/work/pytest.xml').getroot(); s = r if r.tag == 'testsuite' else r[0]; "
            "sys.exit(0 if int(s.get('tests')) > 0 and int(s.get('failures')) + int(s.get('errors')) == 0 else 1)\""
        )
        if not _host_has_pytest():
            return SkippedTask(name, path, "its tests need pytest, which is not installed beside gem-terminal")
    else:
        return SkippedTask(name, path, "no checker (run-tests.sh or tests/test_outputs.py)")
    return TerminalTask(
        name=name,
        path=path,
        instruction=instruction.strip(),
        solution=solution,
        checker=checker,
        tests=tests,
        agent_timeout_s=_seconds(meta, "max_agent_timeout_sec", 600.0),
        test_timeout_s=_seconds(meta, "max_test_timeout_sec", 60.0),
        difficulty=str(meta.get("difficulty", "")),
        tags=tuple(str(t) for t in meta.get("tags") or ()) if isinstance(meta.get("tags") or (), list | tuple) else (),
        **fields,
    )


def _host_has_pytest() -> bool:
    """Whether checkers can get pytest: importable here (the env binds a copy) and a system python3 to run it."""
    import importlib.util

    return importlib.util.find_spec("pytest") is not None and os.path.exists("/usr/bin/python3")


def load_tasks(folder: Path) -> tuple[list[TerminalTask], list[SkippedTask]]:
    """Every task under ``folder`` (each subfolder with a task.yaml), sorted by name, and those skipped."""
    loaded: list[TerminalTask] = []
    skipped: list[SkippedTask] = []
    for path in sorted(Path(folder).iterdir()):
        if path.is_dir() and (path / "task.yaml").exists():
            item = load_task(path)
            if isinstance(item, TerminalTask):
                loaded.append(item)
            else:
                skipped.append(item)
    return loaded, skipped
