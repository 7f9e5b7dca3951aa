"""Multi-turn shell tasks: the model runs commands in an episode sandbox; the task's checker gives the reward."""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gem_core.core import Env, ResetReturn, StepReturn, require_text_action
from gem_core.errors import CheckPhaseError, ConfigError, ResetNeeded, ToolError
from gem_core.registry import format_config_error
from gem_core.tools import MalformedCall, Tool, ToolResult, parse_tool_calls
from gem_terminal.container.backend import Backend, ContainerConfig
from gem_terminal.gitguard import GIT_GUARD, GUARD_PATH
from gem_terminal.loader import REWARD_FILES, SkippedTask, TerminalTask, load_task, load_tasks, read_reward
from gem_terminal.provision import SYSTEM_PYTHON

__all__ = ["TASKS_DIR", "BashTool", "DoneTool", "TerminalEnv", "TerminalEnvConfig", "reference_action"]

#: The tasks shipped with gem-terminal.
TASKS_DIR = Path(__file__).parent / "tasks"

PROMPT = (
    "{instruction}\n\n"
    "You are in a Linux shell (bash) in {workdir}, with no network. Run a command as <bash>COMMAND</bash> "
    '(or as a tool call: <tool_call>{{"name": "bash", "arguments": {{"command": "COMMAND"}}}}</tool_call>); '
    "you will see its output and exit code. Several commands may go in one reply. Files and background "
    "processes persist between turns. When the task is done, reply <done></done>. You have {max_turns} turns."
)


class BashTool(Tool):
    """The terminal env's command tool (declared for parsing; the env runs it in its own sandbox)."""

    name = "bash"
    description = "Run a shell command (bash -c) in the task's sandbox; returns stdout, stderr and the exit code."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "The shell command."}},
        "required": ["command"],
    }
    tag_argument = "command"

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(error="bash runs inside a terminal env's episode sandbox (make a terminal:* env)")


class DoneTool(Tool):
    """Ends the episode; the task's checker then runs."""

    name = "done"
    description = "Say that the task is finished; the task's tests then run."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    tag_argument = "summary"

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(output="done")


def reference_action(task: TerminalTask) -> str:
    """A reply that runs the task's reference solution as one JSON tool call (any text survives quoting)."""
    call = {"name": "bash", "arguments": {"command": task.solution}}
    return f"<tool_call>{json.dumps(call)}</tool_call>"


class TerminalEnvConfig(BaseModel):
    """Configuration of :class:`TerminalEnv`.

    Attributes:
        tasks_dir: A folder of Terminal-Bench v1 or Harbor task folders (default: the tasks shipped here).
        task: Only this task (its folder's name); otherwise ``reset`` draws one per episode from the seed.
        max_turns: Turns before the episode is truncated (the checker still runs).
        max_calls_per_turn: Commands run per reply; further ones are refused with a message.
        command_timeout_s: Wall clock of one command.
        episode_timeout_s: Command time of the whole episode (default: the task's ``max_agent_timeout_sec``).
        max_observation_chars: Longest observation (the middle of longer ones is cut).
        shaping: Per-turn reward for a turn whose commands all exit 0 (0: the checker's reward only).
        sandbox: Further :class:`gem_tool_python.episode.EpisodeConfig` fields (``disk_mb``, ``max_procs``...);
            an explicit ``episode_memory_mb`` or ``disk_mb`` caps a Harbor task's ``memory_mb``/``storage_mb``.
        backend: Where episodes run. ``auto``: a task the sandbox can run (no image to build) runs in the
            sandbox; any other runs in a container of its own image, on Docker where a daemon answers, else
            on Podman (none: it stays skipped with the reason). ``sandbox``, ``podman``, ``docker``: every
            task there. Default: ``$GEM_TERMINAL_BACKEND``, else ``auto``.
        container: :class:`gem_terminal.container.backend.ContainerConfig` fields (``ca_bundle``...).
        pythons: Host interpreters standing in for Python images' (``{"3.13": "/path/to/bin/python3.13"}``):
            a task whose image is ``python-3-13`` or ``python:3.13`` runs with that one (its install folder
            bound read-only at the same path, ``python``/``python3`` first on PATH) instead of being refused.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tasks_dir: str | None = None
    task: str | None = None
    max_turns: int = Field(20, ge=1)
    max_calls_per_turn: int = Field(8, ge=1)
    command_timeout_s: float = Field(30.0, gt=0)
    episode_timeout_s: float | None = Field(None, gt=0)
    max_observation_chars: int = Field(8000, ge=200)
    shaping: float = 0.0
    sandbox: dict[str, Any] = Field(default_factory=dict)
    backend: Backend = "auto"
    container: dict[str, Any] = Field(default_factory=dict)
    pythons: dict[str, str] = Field(default_factory=dict)


_layers: dict[tuple[str, int], Path] = {}
_extras: dict[str, Path] = {}
_layers_lock = threading.Lock()
_layer_root: list[Path] = []


def _cleanup_layers() -> None:
    for root in _layer_root:
        shutil.rmtree(root, ignore_errors=True)


def task_layer(task: TerminalTask, uid: int) -> Path:
    """The task's files (its COPY lines) as a read-only layer, built once per process and task."""
    from gem_tool_python.episode import prepare_layer

    key = (str(task.path.resolve()), uid)
    with _layers_lock:
        if key in _layers:
            return _layers[key]
        if not _layer_root:
            _layer_root.append(Path(tempfile.mkdtemp(prefix="gem-terminal-layers-")))
            atexit.register(_cleanup_layers)
        # Overlay mount options separate layers with ":" and options with ",": keep the path plain.
        staging = Path(
            tempfile.mkdtemp(prefix=re.sub(r"[^A-Za-z0-9_.-]", "_", task.name)[:40] + "-", dir=_layer_root[0])
        )
        files = staging / "files"
        files.mkdir()
        for source, dest in task.copies:
            relative = dest[len(task.workdir) :].strip("/")
            origin = task.path / source
            target = files / relative if relative else files
            if origin.is_dir():
                shutil.copytree(origin, target, symlinks=True, dirs_exist_ok=True)
            else:
                if dest.endswith("/") or target.is_dir():
                    target = target / origin.name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target)
        layer = prepare_layer(files, staging / "layer", uid)
        shutil.rmtree(files)
        _layers[key] = layer
        return layer


#: Where checkers find pytest in the sandbox (``$GEM_PYTEST``; Terminal-Bench's checkers are pytest files).
PYTEST_IN_SANDBOX = "/opt/gem/pytest"
#: A task's optional probe (``tests/gem-probe.sh``): what must be observed while the agent's processes
#: still run (a server it left, a worker's heartbeat). It runs as the checker's uid before anything of the
#: tests enters the sandbox; its output reaches the checker as ``$TEST_DIR/gem-probe.out``.
PROBE = "gem-probe.sh"
#: The checker's environment over the episode's: its own home and ``PATH`` (``as-agent`` and the git guard
#: first; nothing the agent could write), no Python start-up hook from a user site, and git pinned so that
#: nothing in a repository's config runs a program or changes what git reports (the guard,
#: :mod:`gem_terminal.gitguard`, switches off the programs a repository's config names under names of its
#: own: filter and diff drivers), no system-wide git config or attributes: ``safe.directory`` lets the
#: checker's uid read the agent's repositories; replace refs and grafts are ignored.
_GIT_PINNED = {
    "status.showUntrackedFiles": "normal",
    "core.fsmonitor": "false",
    "core.untrackedCache": "false",
    "core.hooksPath": "/dev/null",
    "core.pager": "cat",
    "log.showSignature": "false",
    "diff.external": "",
    "core.attributesFile": "/dev/null",
    # a new repository of the checker's gets no template (a root agent may write /usr/share/git-core/templates)
    "init.templateDir": "",
}
#: The checker's own programs (``as-agent``), first on its PATH.
CHECKER_BIN = "/checker/bin"
CHECKER_ENV = {
    "TEST_DIR": "/tests",
    "HOME": "/checker/home",
    "PATH": "/checker/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",  # see _checker_env
    "GEM_PYTEST": PYTEST_IN_SANDBOX,
    "PYTHONNOUSERSITE": "1",
    "GIT_CONFIG_GLOBAL": "/checker/home/.gitconfig",
    "GIT_NO_REPLACE_OBJECTS": "1",
    # /etc/gitconfig and /etc/gitattributes: a root agent in a container writes them
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TEMPLATE_DIR": "",
    "GIT_PAGER": "cat",
    "GIT_CONFIG_COUNT": str(len(_GIT_PINNED)),
    **{f"GIT_CONFIG_KEY_{i}": key for i, key in enumerate(_GIT_PINNED)},
    **{f"GIT_CONFIG_VALUE_{i}": value for i, value in enumerate(_GIT_PINNED.values())},
}
_CHECKER_GITCONFIG = b"[safe]\n\tdirectory = *\n"


#: Where the ``python`` command of a Python image's task lives in the sandbox (first on its PATH).
PYTHON_SHIM_IN_SANDBOX = "/opt/gem/bin"
#: The sandbox's PATH when the task sets none.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def python_shim_folder(python: str = "/usr/bin/python3") -> Path:
    """A folder (once per process and interpreter) of ``python``/``python3``/``python3.X`` links to ``python``."""
    key = f"python:{python}"
    with _layers_lock:
        if key in _extras:
            return _extras[key]
        if not _layer_root:
            _layer_root.append(Path(tempfile.mkdtemp(prefix="gem-terminal-layers-")))
            atexit.register(_cleanup_layers)
        folder = Path(tempfile.mkdtemp(prefix="python-", dir=_layer_root[0]))
        target = str(Path(python).resolve())
        version = re.search(r"python(\d+\.\d+)$", target)
        for name in ["python", "python3"] + ([f"python{version.group(1)}"] if version else []):
            (folder / name).symlink_to(target)
        folder.chmod(0o755)
        _extras[key] = folder
        return folder


def pytest_folder() -> Path | None:
    """A copy of pytest and what it requires (once per process, from this interpreter's install), for checkers.

    ``None`` when pytest is not installed here. The system ``python3`` in the sandbox imports it
    (pure Python); the copy keeps the rest of this environment's packages out of the sandbox.
    """
    import importlib.metadata

    from gem_tool_python._worker import _distribution_entries

    with _layers_lock:
        if "pytest" in _extras:
            return _extras["pytest"]
        try:
            importlib.metadata.distribution("pytest")
        except importlib.metadata.PackageNotFoundError:
            return None
        if not _layer_root:
            _layer_root.append(Path(tempfile.mkdtemp(prefix="gem-terminal-layers-")))
            atexit.register(_cleanup_layers)
        target = _layer_root[0] / "pytest"
        target.mkdir()
        for entry in sorted(_distribution_entries(["pytest"], [], importlib.metadata)):
            source = Path(entry)
            if source.is_dir():
                shutil.copytree(source, target / source.name, ignore=shutil.ignore_patterns("__pycache__"))
            elif source.is_file():
                shutil.copy2(source, target / source.name)
        _extras["pytest"] = target
        return target


class TerminalEnv(Env):
    """A shell task: the model runs commands in an episode sandbox and says when it is done.

    Reward: 1 when the task's checker (``run-tests.sh``) exits 0 in the episode's root after the
    last turn, else 0; plus ``shaping`` per turn whose commands all succeed (0 by default).
    ``info`` gets ``task``, ``commands`` (run this turn), ``format_error``, and at the end ``success``,
    ``checker_output`` (its tail) and ``ended_by`` (``done``, ``turns``, ``time``, ``output`` or ``closed``).
    A check that gem or the runtime could not make raises :class:`gem_core.errors.CheckPhaseError` from
    that last ``step`` (no reward, not 0); what the agent caused is always the reward. A Harbor task's
    ``[environment]`` memory, storage and cpus apply (:meth:`limits`).
    """

    metadata: ClassVar[dict[str, Any]] = {"multi_turn": True}

    def __init__(self, **kwargs: Any) -> None:
        if "backend" not in kwargs and os.environ.get("GEM_TERMINAL_BACKEND"):
            kwargs = {**kwargs, "backend": os.environ["GEM_TERMINAL_BACKEND"]}  # a machine-wide default
        try:
            self.config = TerminalEnvConfig.model_validate(kwargs)
        except ValidationError as exc:
            raise ConfigError(format_config_error("terminal env", exc)) from exc
        from gem_tool_python.episode import EpisodeConfig

        try:
            self.sandbox_config = EpisodeConfig.model_validate(self.config.sandbox)
        except ValidationError as exc:
            raise ConfigError(format_config_error("terminal env sandbox settings (sandbox=...)", exc)) from exc
        try:
            self.container_config = ContainerConfig.model_validate(self.config.container)
        except ValidationError as exc:
            raise ConfigError(format_config_error("terminal env container settings (container=...)", exc)) from exc
        chosen = self.container_config.runtime
        if self.config.backend in ("docker", "podman") and chosen not in ("auto", self.config.backend):
            raise ConfigError(
                f"terminal env: backend={self.config.backend!r} with container runtime={chosen!r}: name one"
                " runtime (backend='auto' with container={'runtime': ...}, or backend=the runtime)"
            )
        folder = Path(self.config.tasks_dir) if self.config.tasks_dir else TASKS_DIR
        if not folder.is_dir():
            raise ConfigError(f"terminal env: tasks_dir {str(folder)!r} is not a folder of task folders")
        if (folder / "task.yaml").exists() or (folder / "task.toml").exists():  # one task's own folder
            item = load_task(folder, pythons=self.config.pythons)
            self.tasks, self.skipped = ([item], []) if isinstance(item, TerminalTask) else ([], [item])
        else:
            self.tasks, self.skipped = load_tasks(folder, pythons=self.config.pythons)
        #: Tasks that run in a container (their own image) rather than the sandbox.
        self.container_tasks: set[str] = set()
        if self.config.backend != "sandbox":
            self._choose_containers(folder)
        self._refuse_oversized()
        if self.config.task is not None:
            self.tasks = [t for t in self.tasks if t.name == self.config.task]
            if not self.tasks:
                why = next(
                    (f": skipped, {s.reason}" for s in self.skipped if s.name == self.config.task), " is not there"
                )
                raise ConfigError(f"terminal env: task {self.config.task!r} in {folder}{why}")
        if not self.tasks:
            reasons = "; ".join(f"{s.name}: {s.reason}" for s in self.skipped[:5])
            raise ConfigError(
                f"terminal env: no runnable task in {folder}" + (f" (skipped: {reasons})" if reasons else "")
            )
        self._tools = [BashTool(), DoneTool()]
        self._sandbox: Any = None
        self._task: TerminalTask | None = None
        self._turn = 0

    def _choose_containers(self, folder: Path) -> None:
        """Apply ``backend``: which tasks run in a container (all of them, or in ``auto`` those the sandbox skips)."""
        from gem_terminal.container.backend import load_for_container, runtime_for

        if self.config.backend == "auto" and not self.skipped:
            return
        try:
            runtime = runtime_for(self.config.backend, self.container_config.runtime)
        except ToolError as exc:
            if self.config.backend != "auto":
                raise ConfigError(f"terminal env: backend={self.config.backend!r}: {exc}") from exc
            self.skipped = [SkippedTask(s.name, s.path, f"{s.reason}; and {exc}") for s in self.skipped]
            return
        candidates: list[TerminalTask | SkippedTask] = [*self.skipped]
        if self.config.backend != "auto":
            candidates += self.tasks
        loaded = [load_for_container(item.path, runtime, self.container_config) for item in candidates]
        moved = [t for t in loaded if isinstance(t, TerminalTask)]
        keep = [t for t in self.tasks if self.config.backend == "auto"]
        self.tasks = sorted([*keep, *moved], key=lambda t: t.name)
        # A task neither backend runs keeps both reasons: the sandbox's says what the container's does not.
        sandbox_reasons = {item.name: item.reason for item in candidates if isinstance(item, SkippedTask)}
        self.skipped = [
            SkippedTask(s.name, s.path, f"sandbox: {sandbox_reasons[s.name]}; container: {s.reason}")
            if s.name in sandbox_reasons and sandbox_reasons[s.name] != s.reason
            else s
            for s in loaded
            if isinstance(s, SkippedTask)
        ]
        self.container_tasks = {t.name for t in moved}

    def limits(self, task: TerminalTask) -> tuple[int, int, float | None]:
        """The task's ``(memory MiB, disk MiB, CPUs)`` here: Harbor's ``[environment]`` over the env's defaults.

        A task's ``memory_mb`` / ``storage_mb`` replace ``episode_memory_mb`` / ``disk_mb``; where the user
        set those explicitly (``sandbox={...}``) they cap the task's values. ``cpus`` is capped at this
        host's CPU count (runtimes refuse more); ``None`` where the task sets none.
        """
        chosen = self.sandbox_config.model_fields_set
        memory, disk = self.sandbox_config.episode_memory_mb, self.sandbox_config.disk_mb
        if task.memory_mb is not None:
            memory = min(task.memory_mb, memory) if "episode_memory_mb" in chosen else task.memory_mb
        if task.storage_mb is not None:
            disk = min(task.storage_mb, disk) if "disk_mb" in chosen else task.storage_mb
        cpus = min(task.cpus, float(os.cpu_count() or 1)) if task.cpus is not None else None
        return max(memory, 64), max(disk, 1), cpus

    def _refuse_oversized(self) -> None:
        """Skip, with the reason, a task whose memory (after :meth:`limits`) is more than this host has."""
        host_mb = _host_memory_mb()
        if host_mb is None:
            return
        keep = []
        for task in self.tasks:
            memory = self.limits(task)[0]
            if memory > host_mb:
                reason = (
                    f"it asks memory_mb={memory} ([environment]), more than this host's {host_mb} MiB (cap it with"
                    " sandbox={'episode_memory_mb': N})"
                )
                self.skipped.append(SkippedTask(task.name, task.path, reason))
            else:
                keep.append(task)
        self.tasks = keep

    @property
    def task(self) -> TerminalTask | None:
        """The current episode's task."""
        return self._task

    def _pick(self, options: dict[str, Any] | None) -> TerminalTask:
        name = (options or {}).get("task")
        if name is not None:
            for task in self.tasks:
                if task.name == name:
                    return task
            raise ConfigError(f"terminal env: reset(options={{'task': {name!r}}}) names no loaded task")
        return self.tasks[self.py_random.randrange(len(self.tasks))] if len(self.tasks) > 1 else self.tasks[0]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        self._close_sandbox()
        from gem_tool_python.episode import EpisodeSandbox

        task = self._pick(options)
        episode_s = self.config.episode_timeout_s or task.agent_timeout_s
        if task.name in self.container_tasks:
            return self._reset_container(task, episode_s)
        settings = self.sandbox_config.model_dump()
        settings["episode_memory_mb"], settings["disk_mb"], _ = self.limits(task)  # no CPU controller here
        if "max_file_mb" not in self.sandbox_config.model_fields_set:
            # A container has no per-file limit, only its disk: a set-up writing an 80 MB file (Terminal-Bench's
            # extract-safely) must not die of one here.
            settings["max_file_mb"] = max(settings["max_file_mb"], settings["disk_mb"])
        pytest_copy = pytest_folder()
        binds = tuple(self.sandbox_config.binds) + (((str(pytest_copy), PYTEST_IN_SANDBOX),) if pytest_copy else ())
        env = {**task.env, **self.sandbox_config.env}
        if task.python_version:  # a Python image has a `python` command; the host's /usr may not
            binds += ((str(python_shim_folder(task.python)), PYTHON_SHIM_IN_SANDBOX),)
            if task.python != SYSTEM_PYTHON:  # its install folder, where it finds its standard library
                prefix = str(Path(task.python).resolve().parents[1])
                binds += ((prefix, prefix),)
            env["PATH"] = f"{PYTHON_SHIM_IN_SANDBOX}:{env.get('PATH', DEFAULT_PATH)}"
        settings.update(
            binds=binds,
            workdir=task.workdir,
            command_timeout_s=min(self.config.command_timeout_s, episode_s),
            episode_timeout_s=episode_s,
            env=env,
        )
        sandbox = EpisodeSandbox([task_layer(task, self.sandbox_config.uid)], **settings)
        for command in task.setup:
            result = sandbox.run(command, timeout_s=task.test_timeout_s, charge_episode=False)
            if not result.ok:
                sandbox.close()
                raise ToolError(
                    f"terminal task {task.name}: set-up command {command[:80]!r} failed:\n{result.render(2000)}"
                )
        self._sandbox, self._task, self._turn = sandbox, task, 0
        prompt = PROMPT.format(instruction=task.instruction, workdir=task.workdir, max_turns=self.config.max_turns)
        return prompt, {"task": task.name}

    def _reset_container(self, task: TerminalTask, episode_s: float) -> ResetReturn:
        from gem_terminal.container.backend import start_container_episode

        memory, disk, cpus = self.limits(task)
        settings = self.sandbox_config.model_copy(
            update={
                "command_timeout_s": min(self.config.command_timeout_s, episode_s),
                "episode_timeout_s": episode_s,
                "episode_memory_mb": memory,
                "disk_mb": disk,
            }
        )
        episode = start_container_episode(task, self.config.backend, settings, self.container_config, cpus=cpus)
        self._sandbox, self._task, self._turn = episode, task, 0
        prompt = PROMPT.format(instruction=task.instruction, workdir=episode.workdir, max_turns=self.config.max_turns)
        return prompt, {"task": task.name}

    def step(self, action: str) -> StepReturn:
        require_text_action(self, action, "the reply, with commands as <bash>...</bash> and <done></done> at the end")
        if self._sandbox is None or self._task is None:
            raise ResetNeeded("TerminalEnv.step() before reset() (or after the episode ended): call reset() first")
        self._turn += 1
        parsed = parse_tool_calls(action, self._tools)
        outputs: list[str] = []
        commands, all_ok, done = 0, True, False
        for item in parsed.items:
            if isinstance(item, MalformedCall):
                outputs.append(f"[invalid call] {item.message}")
                all_ok = False
            elif item.name == "done":
                done = True
                break
            elif commands >= self.config.max_calls_per_turn:
                outputs.append(f"[refused] at most {self.config.max_calls_per_turn} commands per reply")
                all_ok = False
            else:
                command = str(item.arguments.get("command", ""))
                result = self._sandbox.run(command)
                commands += 1
                all_ok = all_ok and result.ok
                outputs.append(f"$ {command}\n{result.render()}")
        info: dict[str, Any] = {"task": self._task.name, "commands": commands, "format_error": not parsed}
        if not parsed:
            outputs.append("No command found. Run one as <bash>COMMAND</bash>, or reply <done></done> when finished.")
        reward = self.config.shaping if commands and all_ok else 0.0
        spent = self._sandbox.spent  # the time or output budget, or the sandbox itself: no command can run
        if done or self._turn >= self.config.max_turns or spent:
            try:
                score, checker_output = self._check()
            except BaseException:
                self._close_sandbox()  # a check that could not be made: the episode is over, with no reward
                raise
            passed = score >= 1.0
            reward += score
            ended_by = "done" if done else spent or "turns"
            info.update(success=passed, checker_output=checker_output, ended_by=ended_by)
            outputs.append(f"[episode over] the task's tests {'passed' if passed else 'failed'}.")
            self._close_sandbox()
            return self._cap("\n\n".join(outputs)), reward, done, not done, info
        return self._cap("\n\n".join(outputs)), reward, False, False, info

    def _check(self) -> tuple[float, str]:
        """Run the task's checker in the episode's root; ``(reward, the tail of its output)``.

        In order: the task's probe (if any) while the agent's processes run; every process of the
        agent killed (the sandbox: through the episode's cgroup, and the check fails if one survives;
        a container: stopped, and the checker runs in a fresh one of its files); the tests written to
        ``/tests`` (the checker's uid alone reads them); ``as-agent`` served and the git guard
        (:mod:`gem_terminal.gitguard`) first on the checker's ``PATH``; then the checker, as the
        checker's uid. Terminal-Bench: 1.0 when the checker exits 0. Harbor: the number it writes to a
        reward file (:func:`gem_terminal.loader.read_reward`); the files are emptied first, so nothing
        the agent wrote there counts.

        What the agent caused (a failing checker, files it broke, a disk it filled, processes that would
        not die) is the task's reward, 0; what gem or the runtime failed at is no reward at all.

        Raises:
            CheckPhaseError: the check could not be made on gem's or the runtime's side (a runtime call
                past its bound or exiting non-zero, the sandbox ended or closed by gem).
        """
        assert self._task is not None
        task, sandbox = self._task, self._sandbox
        in_container = task.name in self.container_tasks
        if sandbox.removed if in_container else sandbox.closed:
            raise self._phase_error(
                "start", "close", "the episode's sandbox had ended (closed, or its process gone) before the check"
            )
        probe = self._probe(task)
        staged = sandbox.begin_check() if in_container else self.stage_checker()
        if staged is not None:
            return 0.0, staged
        # the git guard first on the checker's PATH (gitguard.py), then the tests
        files = [(GUARD_PATH, GIT_GUARD.encode())]
        files += [(f"/tests/{relative}", data) for relative, data in task.tests.items()]
        if probe is not None:
            files.append((f"/tests/{PROBE[:-3]}.out", probe.encode()))
        files.append(("/tests/run-tests.sh", task.checker.encode()))
        for path, data in files:
            executable = path.endswith(".sh") or path == GUARD_PATH
            refused = self._write("write-tests", path, data, mode=0o755 if executable else 0o644)
            if refused is not None:
                return 0.0, refused
        return self.score_checker("bash /tests/run-tests.sh")

    def _write(self, phase: str, path: str, data: bytes, *, mode: int = 0o644, owner: str | None = None) -> str | None:
        """Write a file of the check; why the checker cannot run by the agent's doing (its disk full), else ``None``.

        Raises:
            CheckPhaseError: the write failed on gem's side.
        """
        sandbox = self._sandbox
        try:
            if owner is None or self._task is None or self._task.name in self.container_tasks:
                sandbox.write_file(path, data, mode=mode)
            else:
                sandbox.write_file(path, data, mode=mode, owner=owner)
        except ToolError as exc:
            # The sandbox's scratch (its tmpfs: files and inodes) is the agent's to fill; the checker's
            # files go there too. Past its allowance, a container's disk is the agent's doing as well.
            full = _disk_full(exc)
            if full is not None:
                return full
            raise self._phase_error(phase, "write_file", str(exc)) from exc
        return None

    def _phase_error(self, phase: str, call: str, what: str) -> CheckPhaseError:
        """A :class:`CheckPhaseError` of this episode's check, naming the phase, the call and what to do."""
        name = self._task.name if self._task is not None else "?"
        where = "container" if name in self.container_tasks else "sandbox"
        return CheckPhaseError(
            f"terminal task {name}: the check could not be made ({phase}, the {where}'s {call}): {what}. This is"
            " gem's or the runtime's failure, not the agent's: the episode has no reward (not 0); the episode"
            " engine ends it with end_reason='error' (on_env_error='end'), which trainers leave out. Play the"
            " task again; if it recurs, see docs/terminal.md ('When the check cannot be made')",
            phase=phase,
            call=call,
        )

    def score_checker(self, command: str) -> tuple[float, str]:
        """Run ``command`` as the checker and score it by the task's contract: ``(reward, its output's tail)``.

        Call after :meth:`stage_checker` (or a container's ``begin_check``) with the tests written.
        Terminal-Bench: 1.0 when it exits 0. Harbor: the number it writes to a reward file
        (:func:`gem_terminal.loader.read_reward`); both files are emptied first (as root, writable by the
        checker alone), so nothing the agent or an earlier run wrote there counts.

        Raises:
            CheckPhaseError: the sandbox ended during the check, or a file of the check could not be written
                on gem's side (see :meth:`_check`).
        """
        assert self._task is not None
        task = self._task
        if task.reward == "reward-file":
            # a container's reward folder was made afresh as root by the check's preparation
            # (gem_terminal.container.session.CHECK_PREPARE): no link, mode or file of the agent's is left
            for path in REWARD_FILES:
                refused = self._write("reward", path, b"", owner="checker")
                if refused is not None:
                    return 0.0, refused
        result = self.run_checker(output_tail(command, self._sandbox.config.max_output_bytes // 2), task.test_timeout_s)
        if result.status == "closed":
            raise self._phase_error("checker", "run", result.error or "the sandbox ended during the checker")
        # pytest's "2 passed in 0.03s" would make info differ between identical episodes.
        output = re.sub(r" in \d+(?:\.\d+)?s\b", " in <time>", result.render(2000))
        if task.reward == "exit-code":
            return (1.0 if result.ok else 0.0), output
        if task.name in self.container_tasks:  # the checker is root there: what only root may have written counts
            paths = " ".join([REWARD_FOLDER, *REWARD_FILES])
            listing = self.run_checker(f"stat -c '%n|%F|%u|%a|%h' {paths} 2>/dev/null", 10.0)
            lines = listing.stdout.splitlines()
            if not any(line.startswith(f"{REWARD_FOLDER}|") for line in lines):
                # the folder was just made afresh, so only a failed listing (no `stat` in the image, the
                # container gone) leaves it out: the owners cannot be checked, and no reward is read unchecked
                raise self._phase_error(
                    "reward", "stat", f"the reward folder's owner could not be listed ({listing.render(300)})"
                )
            foreign = foreign_reward_files(lines)
            if foreign:
                return 0.0, output + f"\n[reward] 0: {foreign}"
        files = self.run_checker(
            f"cat {REWARD_FILES[0]} 2>/dev/null; printf '\\n\\0'; cat {REWARD_FILES[1]} 2>/dev/null", 10.0
        )
        if files.status in ("closed", "timeout"):
            raise self._phase_error("reward", "run", files.error or "reading the reward files did not finish")
        json_text, _, text = files.stdout.partition("\0")
        score, why = read_reward(json_text, text)
        return score, output + (f"\n[reward] {why}" if why else f"\n[reward] {score:g}")

    def _probe(self, task: TerminalTask) -> str | None:
        """The task's probe's output (its stdout, then a line with its exit code), if it has one.

        Raises:
            CheckPhaseError: the probe's runtime call ran past its bound, or the sandbox ended under it.
        """
        script = task.tests.get(PROBE)
        if script is None:
            return None
        if task.name in self.container_tasks:  # beside the agent's processes, in an exec of its own
            # the image's PATH alone: /checker/bin is made for the check, and the agent (root) may write it now
            env = self._checker_env(task)
            env["PATH"] = env["PATH"].removeprefix(f"{CHECKER_BIN}:")
            try:
                result = self._sandbox.probe(script.decode("utf-8", "replace"), timeout_s=task.test_timeout_s, env=env)
            except ToolError as exc:
                raise self._phase_error("probe", "exec", str(exc)) from exc
        else:
            result = self._sandbox.run(
                script.decode("utf-8", "replace"),
                timeout_s=task.test_timeout_s,
                env=self._checker_env(task),
                charge_episode=False,
                checker=True,
            )
            if result.status == "closed":
                raise self._phase_error("probe", "run", result.error or "the sandbox ended during the probe")
        return f"{result.stdout}[exit code] {result.exit_code if result.exit_code is not None else 'none'}\n"

    def stage_checker(self) -> str | None:
        """End the agent (every process it started) and set up the checker's home and ``as-agent``.

        Returns why the checker must not run (an agent process survived the kill: the agent's doing),
        else ``None``.

        Raises:
            CheckPhaseError: the sandbox ended, or a step failed on gem's side.
        """
        sandbox = self._sandbox
        survivors = sandbox.end_agent()
        if sandbox.closed:
            raise self._phase_error(
                "end-agent", "end_agent", "the sandbox ended while the agent's processes were killed"
            )
        if survivors:
            return f"{survivors} processes of the agent could not be killed; the tests did not run"
        if self._task is not None and not self._task.checker_uses_as_agent:
            # a checker written for a container runs as root there: it writes into the work dir and makes
            # folders at the top, so the agent's files become the checker's uid's (the agent is gone now)
            try:
                refused = sandbox.hand_over_to_checker()
            except ToolError as exc:
                raise self._phase_error("checker-start", "hand_over_to_checker", str(exc)) from exc
            if refused is not None:
                return refused
        refused = self._write(
            "checker-start", f"{CHECKER_ENV['HOME']}/.gitconfig", _CHECKER_GITCONFIG, mode=0o600, owner="checker"
        )
        if refused is not None:
            return refused
        try:
            sandbox.serve_agent()
        except ToolError as exc:
            full = _disk_full(exc)  # writing as-agent's program: the agent's disk
            if full is not None:
                return full
            raise self._phase_error("checker-start", "serve_agent", str(exc)) from exc
        return None

    def run_checker(self, command: str, timeout_s: float) -> Any:
        """Run ``command`` as the checker (after :meth:`stage_checker`), outside the episode's budgets."""
        assert self._task is not None
        env = self._checker_env(self._task)
        return self._sandbox.run(command, timeout_s=timeout_s, env=env, charge_episode=False, checker=True)

    def _checker_env(self, task: TerminalTask) -> dict[str, str]:
        """:data:`CHECKER_ENV` with the agent's ``PATH`` (the image's ``ENV``) behind ``/checker/bin``.

        In a container the image's ``PATH`` applies as written (the integrity check refuses the checker
        when a checker tool on it changed). In the sandbox, where nothing compares the agent's files
        with the task's, the system folders come first and the task's own folders after them (an agent
        cannot shadow ``python3`` there); a Python image's ``python`` keeps its place ahead of both.
        """
        if task.name in self.container_tasks:
            agent_path = {**self._sandbox.image_env, **self.sandbox_config.env}.get("PATH") or DEFAULT_PATH
            return {**CHECKER_ENV, "PATH": f"{CHECKER_BIN}:{agent_path}"}
        system = DEFAULT_PATH.split(":")
        wanted = ({**task.env, **self.sandbox_config.env}.get("PATH") or DEFAULT_PATH).split(":")
        folders = [*system, *(f for f in wanted if f and f not in system)]
        if task.python_version:
            folders.insert(0, PYTHON_SHIM_IN_SANDBOX)
        return {**CHECKER_ENV, "PATH": ":".join([CHECKER_BIN, *dict.fromkeys(folders)])}

    def _cap(self, text: str) -> str:
        limit = self.config.max_observation_chars
        if len(text) <= limit:
            return text
        return text[: limit // 2] + "\n...[observation truncated]...\n" + text[-limit // 2 :]

    def _close_sandbox(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None

    def close(self) -> None:
        self._close_sandbox()
        self._task = None

    def sample_random_action(self) -> str:
        return self.py_random.choice(["<bash>ls</bash>", "<bash>pwd</bash>", "<bash>echo hi</bash>", "<done></done>"])


def _disk_full(exc: ToolError) -> str | None:
    """Why the checker cannot run when ``exc`` (a write of the check's files) ran out of disk, else ``None``.

    The sandbox's scratch (its tmpfs: files and inodes) is the agent's to fill, and the checker's files go
    there too: a full disk is the agent's doing, a reward of 0, not gem's failure.
    """
    if "[Errno 28]" in str(exc) or "No space left" in str(exc):
        return f"the checker's files could not be written: the agent filled its disk ({exc})"
    return None


def output_tail(command: str, tail_bytes: int) -> str:
    """``command`` (a checker, run by bash) with only the last ``tail_bytes`` of its output printed; its exit code.

    A verifier's output is not the agent's, and Harbor does not limit it: through the per-command output cap
    (a pipe whose reader stops there), a verifier printing more (``pytest -rA`` over a large suite, an
    ``apt-get`` in ``test.sh``) would die of SIGPIPE before writing its reward. ``tail`` reads all of it and
    keeps the end in memory: no file, no disk, and nothing the agent's programs could reach.
    """
    return f'( {command}\n) 2>&1 < /dev/null | tail -c {max(tail_bytes, 64)}\nexit "${{PIPESTATUS[0]}}"'


def _host_memory_mb() -> int | None:
    """This host's memory (``MemTotal``), in MiB; ``None`` where ``/proc/meminfo`` does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) >> 10
    except (OSError, ValueError, IndexError):
        return None
    return None


#: The folder of Harbor's reward files.
REWARD_FOLDER = "/logs/verifier"


def foreign_reward_files(stat_lines: list[str]) -> str | None:
    """Why the reward files are not the checker's alone (in a container, where the checker is root), else ``None``.

    ``stat_lines`` are ``stat -c '%n|%F|%u|%a|%h'`` lines (not following links) of :data:`REWARD_FOLDER` and
    the reward files. The folder must be a folder of root's that no other uid may write, each reward file
    there a regular file of root's with one link: a checker that, as root, opened a path the agent made
    (a link to ``/logs/verifier``) to the agent's programs let them write a reward of their own, and a hard
    link is a file of root's the agent chose.
    """
    for line in stat_lines:
        name, kind, uid, mode, links = [*line.split("|"), "", "", "", ""][:5]
        if name == REWARD_FOLDER:
            writable_by_others = not mode.isdigit() or int(mode, 8) & 0o022
            if kind != "directory" or uid != "0" or writable_by_others:
                return f"{name} is a {kind} of uid {uid}, mode {mode}: not a folder only root may write"
        elif kind not in ("regular file", "regular empty file") or uid != "0" or links != "1":
            return f"{name} is a {kind} of uid {uid} with {links} link(s): not a file only root wrote"
    return None


def skipped_tasks(folder: Path) -> list[SkippedTask]:
    """The tasks in ``folder`` the sandbox cannot run, with the reasons."""
    return load_tasks(folder)[1]
