"""An episode-scoped shell sandbox: one writable root whose files and processes live across turns.

:class:`EpisodeSandbox` starts one confined process tree per episode (see ``_episode_worker.py``):
new mount, pid, network, IPC and UTS namespaces; a size-capped tmpfs holding an overlay of the
task's read-only layers at the work dir (``/app``), so starting an episode copies nothing; the
host's system directories bound read-only; one cgroup (memory, processes) for everything the
episode starts. Each command runs as ``bash -c`` in a new session, under the episode's uid, with
rlimits, ``no_new_privs`` and the one-shot sandbox's seccomp filter. :meth:`EpisodeSandbox.close`
ends the namespaces (the kernel kills every process left, the mounts go with the namespace) and
removes the cgroup and the scratch folder. See ``docs/terminal.md``.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gem_core.errors import ToolError
from gem_core.tools.safety import clean_text
from gem_tool_python.cgroups import CallCgroups
from gem_tool_python.cgroups import detect as detect_cgroups

__all__ = [
    "OUTPUT_CUT",
    "CommandResult",
    "EpisodeBudget",
    "EpisodeConfig",
    "EpisodeSandbox",
    "episodes_available",
    "keep_ends",
    "prepare_layer",
    "processes_of",
]

_WORKER = str(Path(__file__).with_name("_episode_worker.py"))
#: Host directories every episode sees read-only at the same place (symlinks are recreated as links).
SYSTEM_DIRS: tuple[str, ...] = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
#: What a command's environment holds besides ``EpisodeConfig.env`` (the host's is never passed).
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/home/agent",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
    "GIT_AUTHOR_NAME": "agent",
    "GIT_AUTHOR_EMAIL": "agent@sandbox",
    "GIT_COMMITTER_NAME": "agent",
    "GIT_COMMITTER_EMAIL": "agent@sandbox",
    "PYTHONDONTWRITEBYTECODE": "1",
}
#: A request carries at most this much (commands, file chunks); SOCK_SEQPACKET keeps the boundaries.
_MESSAGE_BYTES = 96_000
#: Where the checker's files go (the checker's uid alone may read them; written only once the agent is gone).
TESTS_DIR = "/tests"
#: The checker's home, its ``as-agent`` program and the socket that serves it (:meth:`EpisodeSandbox.serve_agent`).
CHECKER_HOME = "/checker/home"
AS_AGENT = "/checker/bin/as-agent"
AS_AGENT_SOCKET = "/checker/agent.sock"
#: The episode's cgroup parts: init (and its keeper), the agent's commands, the checker's.
_PARTS = ("init", "agent", "checker")
#: Memory an episode keeps for its processes whatever its files take: the scratch tmpfs is at most
#: ``episode_memory_mb`` minus this (and at least 16 MiB), so a full disk cannot OOM the episode.
_PROCESS_RESERVE_MB = 32
#: Kernel memory per file (inode, dentry, overlay inode) the inode cap budgets for: the scratch tmpfs holds at
#: most a quarter of the episode's memory in files' metadata.
_BYTES_PER_INODE = 4096
#: After a command exits, how long its pipes may still deliver output held by background children.
_DRAIN_GRACE_S = 0.05
#: How long a close waits for init to see the socket close before its keeper is told to kill it.
CLOSE_GRACE_S = 5.0
#: How long a close then waits for the kernel to empty the episode's pid namespace.
CLOSE_KILL_WAIT_S = 30.0

Status = Literal["ok", "exit", "timeout", "episode_limit", "killed", "closed"]


class EpisodeConfig(BaseModel):
    """Limits of one episode sandbox (validated; errors name the field).

    Attributes:
        command_timeout_s: Wall clock of one command; its session is killed at it.
        episode_timeout_s: Wall clock of all commands of the episode together; past it commands are refused.
        max_output_bytes: Captured stdout (and, separately, stderr) of one command. A command writing more
            runs on; its first and last bytes are kept, with a line saying the middle was left out.
        max_episode_output_bytes: Output of all commands together; past it commands are refused.
        cpu_s: CPU seconds per process.
        memory_mb: Address space per process.
        episode_memory_mb: Memory of all the episode's processes and files together (cgroup).
        max_procs: Processes and threads of the episode at once (its pids cgroup). When a command's
            processes hit it, every process of the episode but init is killed and the result says so.
        uid_max_procs: RLIMIT_NPROC of the shared uid: a machine-wide net for all episodes together,
            the only process bound where cgroups are unavailable.
        max_file_mb: Largest file a command may write.
        disk_mb: Size of the episode's writable scratch (the work dir's changes, ``/tmp``, home).
        max_open_files: File descriptors per process.
        workdir: Where the task's layers appear (read-write) and commands start.
        uid: The unprivileged uid every command runs as; task layers are owned by it
            (:func:`prepare_layer`). Episodes share it but not namespaces: one cannot see or
            signal another's processes or files.
        checker_uid: The uid of checker commands (``run(..., checker=True)``); default ``uid + 1``.
            Never the agent's: the agent cannot signal, trace or read what only it may.
        env: Extra environment variables for the commands.
        binds: Further host folders the commands may read: ``(host path, path in the sandbox)``, read-only.
        cgroups: Put the episode in its own cgroup where the host allows it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    command_timeout_s: float = Field(30.0, gt=0)
    episode_timeout_s: float = Field(600.0, gt=0)
    max_output_bytes: int = Field(16_384, ge=256)
    max_episode_output_bytes: int = Field(1_000_000, ge=256)
    cpu_s: int = Field(30, ge=1)
    memory_mb: int = Field(2048, ge=64)
    episode_memory_mb: int = Field(1024, ge=64)
    max_procs: int = Field(64, ge=4)
    uid_max_procs: int = Field(4096, ge=4)
    max_file_mb: int = Field(64, ge=1)
    disk_mb: int = Field(256, ge=1)
    max_open_files: int = Field(1024, ge=16)
    workdir: str = Field("/app", pattern=r"^/[A-Za-z0-9_./-]+$")
    uid: int = Field(1_400_000_000, ge=1000, le=4_000_000_000)
    checker_uid: int | None = Field(None, ge=1000, le=4_000_000_000)
    env: dict[str, str] = Field(default_factory=dict)
    binds: tuple[tuple[str, str], ...] = ()
    cgroups: bool = True

    @model_validator(mode="after")
    def _distinct_uids(self) -> EpisodeConfig:
        if self.checker_uid is not None and self.checker_uid == self.uid:
            raise ValueError("checker_uid must differ from uid: the checker never runs as the agent")
        return self

    @property
    def checker(self) -> int:
        """The checker's uid (``checker_uid``, else ``uid + 1``)."""
        return self.checker_uid if self.checker_uid is not None else self.uid + 1

    @property
    def scratch_bytes(self) -> int:
        """Size of the scratch tmpfs: ``disk_mb``, kept under the episode's memory when cgroups charge it."""
        if not self.cgroups:
            return self.disk_mb << 20
        return min(self.disk_mb, max(self.episode_memory_mb - _PROCESS_RESERVE_MB, 16)) << 20

    @property
    def max_inodes(self) -> int:
        """Files and folders the scratch tmpfs may hold (their kernel memory counts against the episode's)."""
        return max((self.episode_memory_mb << 20) // 4 // _BYTES_PER_INODE, 1024)


#: The line between the start and the end of an output that ran past ``max_output_bytes``.
OUTPUT_CUT = "\n...[the output ran past {cap} bytes: its middle was left out]...\n"


def keep_ends(head: bytes, ending: bytes, cap: int) -> bytes:
    """A command's output within ``cap`` bytes and one line.

    Args:
        head: The stream's first bytes: all of it when it is at most ``cap`` long, else at least ``cap + 1``.
        ending: Its last bytes (at least ``cap - cap // 2`` when it ran past ``cap``).
        cap: ``max_output_bytes``.
    """
    if len(head) <= cap:
        return head
    keep = cap - cap // 2
    return head[: cap // 2] + OUTPUT_CUT.format(cap=cap).encode() + ending[-keep:]


@dataclass
class CommandResult:
    """What one command did.

    Attributes:
        status: ``ok`` (exit code 0); ``exit`` (non-zero exit code); ``timeout`` (command wall clock);
            ``episode_limit`` (the episode's time or output budget is spent: not run);
            ``killed`` (a signal, such as the CPU or memory limit); ``closed`` (the episode is gone).
        stdout: Captured standard output (at most ``max_output_bytes`` and the line of :func:`keep_ends`).
        stderr: Captured standard error (same cap).
        exit_code: The shell's exit code (``128 + signal`` when killed), if it ended by itself.
        elapsed_s: Wall-clock seconds of the command.
        error: What went wrong, for the model; ``None`` for ``ok`` and ``exit``.
    """

    status: Status
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    elapsed_s: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the command exited with code 0."""
        return self.status == "ok"

    def render(self, max_chars: int | None = None) -> str:
        """The result as the model sees it: output, errors and the exit code."""
        parts = []
        if self.stdout:
            parts.append(self.stdout.rstrip("\n"))
        if self.stderr:
            parts.append("[stderr]\n" + self.stderr.rstrip("\n"))
        if self.error:
            parts.append(f"[{self.status}] {self.error}")
        parts.append(f"[exit code] {self.exit_code if self.exit_code is not None else 'none'}")
        text = "\n".join(parts)
        if max_chars is not None and len(text) > max_chars:
            text = text[: max_chars // 2] + "\n...[truncated]...\n" + text[-max_chars // 2 :]
        return text


class EpisodeBudget:
    """An episode's command-time and output budgets, shared by every backend that runs an episode.

    Commands with ``charge_episode`` are refused once a budget is spent, get at most the time left,
    and are charged their wall clock and output; set-up and checker commands are not charged.
    """

    def __init__(self, config: EpisodeConfig) -> None:
        self.timeout_s = float(config.episode_timeout_s)
        self.max_bytes = config.max_episode_output_bytes
        self.spent_s = 0.0
        self.spent_bytes = 0

    @property
    def remaining_s(self) -> float:
        """Command time left."""
        return max(self.timeout_s - self.spent_s, 0.0)

    def spent(self, closed: bool) -> str | None:
        """Which budget is spent (``time``, ``output``), ``closed`` when the episode is, else ``None``."""
        if closed:
            return "closed"
        if self.remaining_s <= 0:
            return "time"
        if self.spent_bytes >= self.max_bytes:
            return "output"
        return None

    def refusal(self) -> CommandResult | None:
        """The ``episode_limit`` result of a charged command when a budget is spent, else ``None``."""
        if self.remaining_s <= 0:
            return CommandResult("episode_limit", error=f"the episode's {self.timeout_s:g} s of command time are spent")
        if self.spent_bytes >= self.max_bytes:
            return CommandResult("episode_limit", error=f"the episode's {self.max_bytes} bytes of output are spent")
        return None

    def allowance(self, timeout_s: float, charge_episode: bool) -> float:
        """A command's wall clock: ``timeout_s``, cut to the time left when it is charged."""
        return min(timeout_s, self.remaining_s) if charge_episode else timeout_s

    def charge(self, elapsed_s: float, output_chars: int) -> None:
        """Count a charged command's wall clock and output."""
        self.spent_s += elapsed_s
        self.spent_bytes += output_chars


def episodes_available() -> tuple[bool, str]:
    """Whether this host can run episode sandboxes, and why not (root with mount namespaces and overlayfs)."""
    if not sys.platform.startswith("linux"):
        return False, "episode sandboxes need Linux"
    if os.geteuid() != 0:
        return False, "episode sandboxes need root (or CAP_SYS_ADMIN) for namespaces and the overlay mount"
    try:
        text = Path("/proc/filesystems").read_text()
    except OSError as exc:
        return False, f"cannot read /proc/filesystems: {exc}"
    if "overlay" not in text:
        return False, "the kernel has no overlayfs (modprobe overlay)"
    return True, ""


def processes_of(uid: int) -> list[int]:
    """Host pids running as ``uid`` (what :meth:`EpisodeSandbox.close` must leave none of)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    found.append(int(entry))
    return found


def prepare_layer(source: Path, target: Path, uid: int = EpisodeConfig.model_fields["uid"].default) -> Path:
    """Copy a task's files into ``target`` once, owned by the episodes' ``uid``, as a read-only layer.

    Episodes mount it as the lower layer of their work dir, so each new episode costs no copy.
    """
    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    for folder, dirs, files in os.walk(target):
        for name in [folder, *(os.path.join(folder, d) for d in dirs), *(os.path.join(folder, f) for f in files)]:
            os.lchown(name, uid, uid)
    return target


_layer_sizes: dict[str, tuple[int, int]] = {}


def _layers_size(layers: tuple[str, ...]) -> tuple[int, int]:
    """Bytes (rounded up to pages) and entries of the read-only layers, each walked once per process."""
    total_bytes = total_inodes = 0
    for layer in layers:
        if layer not in _layer_sizes:
            size = count = 0
            for folder, dirs, files in os.walk(layer):
                for name in [*dirs, *files]:
                    with contextlib.suppress(OSError):
                        size += -(-os.lstat(os.path.join(folder, name)).st_size // 4096) * 4096
                    count += 1
            _layer_sizes[layer] = (size, count + 1)
        total_bytes, total_inodes = total_bytes + _layer_sizes[layer][0], total_inodes + _layer_sizes[layer][1]
    return total_bytes, total_inodes


class _Zygote:
    """This process's episode fork server (``_episode_worker.py``): one interpreter start-up for all episodes."""

    def __init__(self) -> None:
        server, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.server = server
        self.pid = os.getpid()
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", _WORKER, str(child.fileno())],
            pass_fds=[child.fileno()],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        child.close()

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.process.poll() is None

    def fork(self, settings: bytes, fds: list[int]) -> None:
        try:
            socket.send_fds(self.server, [settings], fds)
        except OSError as exc:
            raise ToolError(f"the episode sandbox's fork server is gone ({exc})") from exc


_zygotes: list[_Zygote] = []
_zygote_lock = threading.Lock()


def _zygote() -> _Zygote:
    """This process's fork server, started (again) when missing, dead, or inherited through a fork."""
    with _zygote_lock:
        if not _zygotes or not _zygotes[0].alive():
            if not _zygotes:
                atexit.register(_stop_zygote)
            _stop_zygote()
            _zygotes[:] = [_Zygote()]
        return _zygotes[0]


def _stop_zygote() -> None:
    """Close this process's fork server (its running episodes end with it: parent-death signals)."""
    for server in _zygotes:
        if server.pid != os.getpid():
            continue  # a forked child's copy: the server belongs to the parent
        server.server.close()
        try:
            server.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()


#: The checker's ``as-agent``: runs its arguments as the agent (see :meth:`EpisodeSandbox.serve_agent`).
_AS_AGENT_PROGRAM = f"""#!/usr/bin/python3 -I
# as-agent PROGRAM ARGS...: run PROGRAM as the agent's uid, with this process's stdin, stdout, stderr and folder.
import json, os, socket, sys
if len(sys.argv) < 2:
    sys.exit("usage: as-agent PROGRAM [ARGS...]")
conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
conn.connect({AS_AGENT_SOCKET!r})
socket.send_fds(conn, [json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd()}}).encode()], [0, 1, 2])
reply = conn.recv(65536)
answer = json.loads(reply) if reply else {{"code": 125, "error": "the episode ended"}}
if answer.get("error"):
    print("as-agent:", answer["error"], file=sys.stderr)
sys.exit(answer["code"])
"""

_cgroups: dict[tuple[int, int], tuple[CallCgroups | None, str]] = {}
_cgroups_lock = threading.Lock()


def _episode_cgroups(memory_bytes: int, max_pids: int) -> CallCgroups | None:
    with _cgroups_lock:
        key = (memory_bytes, max_pids)
        if key not in _cgroups:
            _cgroups[key] = detect_cgroups(memory_bytes, max_pids)
        return _cgroups[key][0]


class EpisodeSandbox:
    """One episode's confined root; commands run one at a time, state persists until :meth:`close`.

    Args:
        layers: Read-only host directories stacked at the work dir, top first (see :func:`prepare_layer`).
        config: Limits; keyword overrides are merged into it.

    Raises:
        ToolError: the host cannot run episode sandboxes (see :func:`episodes_available`), or set-up failed.
    """

    def __init__(
        self, layers: list[Path] | tuple[Path, ...] = (), config: EpisodeConfig | None = None, **overrides: Any
    ):
        base = config or EpisodeConfig()
        self.config = EpisodeConfig.model_validate({**base.model_dump(), **overrides}) if overrides else base
        usable, reason = episodes_available()
        if not usable:
            raise ToolError(f"episode sandbox unavailable: {reason}")
        for source, target in self.config.binds:
            if not os.path.isdir(source) or not target.startswith("/") or ".." in target.split("/"):
                raise ToolError(
                    f"episode sandbox: bind {source!r} -> {target!r} needs a host folder and an absolute path"
                )
        resolved = [str(Path(p).resolve()) for p in layers]
        self._layers = tuple(resolved)
        for path in [*resolved, tempfile.gettempdir()]:
            if any(c in path for c in ":,\\") or not os.path.isdir(path):
                raise ToolError(
                    f"episode sandbox: {path!r} must be a folder whose path has no ':', ',' or '\\' (overlay)"
                )
        self._lock = threading.Lock()
        self._next_id = 0
        self.budget = EpisodeBudget(self.config)
        self._closed = False
        self._keeper: int | None = None
        self._keeper_fd: int | None = None
        self._alive: int | None = None
        self._pid_hits_seen = 0
        self._scratch = tempfile.mkdtemp(prefix="gem-episode-")
        self._groups = (
            # The whole episode: the agent's and the checker's parts, max_procs each, and init's few.
            _episode_cgroups(self.config.episode_memory_mb << 20, 2 * self.config.max_procs + 8)
            if self.config.cgroups
            else None
        )
        self._group_name: str | None = None
        group_fds: list[int] = []
        self._part_fds = {part: 0 for part in _PARTS}
        started = time.monotonic()
        try:
            if self._groups is not None:
                self._group_name, parts = self._groups.create_parts(_PARTS, self.config.max_procs)
                self._part_fds = {part: len(parts[part]) for part in _PARTS}
                group_fds = [fd for part in _PARTS for fd in parts[part]]
            host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self._sock = host
            alive_r, alive_w = os.pipe()
            self._alive = alive_r
            cfg = self._worker_config(resolved)
            try:
                _zygote().fork(json.dumps(cfg).encode(), [child.fileno(), alive_w, *group_fds])
            finally:
                child.close()
                os.close(alive_w)
                for fd in group_fds:
                    os.close(fd)
                group_fds = []
            deadline = time.monotonic() + 30.0
            reply = self._receive(deadline)
            if reply is not None and reply.get("event") == "keeper":
                self._keeper = int(reply["pid"])
                with contextlib.suppress(OSError):  # alive now: it holds the pipe until init is gone
                    self._keeper_fd = os.pidfd_open(self._keeper)
                reply = self._receive(deadline)
            if reply is None or reply.get("event") != "ready":
                detail = reply.get("error") if reply else "no answer from the sandbox process (see its stderr)"
                raise ToolError(f"episode sandbox did not start: {detail}")
        except BaseException:
            for fd in group_fds:
                os.close(fd)
            self.close()
            raise
        self.setup_s = time.monotonic() - started

    def _worker_config(self, layers: list[str]) -> dict[str, Any]:
        c = self.config
        return {
            "scratch": self._scratch,
            "disk_bytes": c.scratch_bytes,
            "max_inodes": c.max_inodes,
            "uid": c.uid,
            "checker_uid": c.checker,
            "cgroup_fds": self._part_fds,
            "workdir": c.workdir,
            "layers": layers,
            "system": [p for p in SYSTEM_DIRS if os.path.lexists(p)],
            "binds": [list(pair) for pair in c.binds],
            "env": {**BASE_ENV, **c.env},
            "limits": {
                "cpu_s": c.cpu_s,
                "memory_bytes": c.memory_mb << 20,
                "fsize_bytes": c.max_file_mb << 20,
                "nofile": c.max_open_files,
                "nproc": c.uid_max_procs,
                "uid": c.uid,
            },
        }

    def _receive(self, deadline: float) -> dict[str, Any] | None:
        """The next reply, or ``None`` at the deadline or when the episode is gone."""
        remaining = max(deadline - time.monotonic(), 0.0)
        if self._sock.fileno() < 0:  # closed by close() in another thread
            return None
        if not select.select([self._sock], [], [], remaining)[0]:
            return None
        try:
            data = self._sock.recv(1 << 16)
        except OSError:  # the episode's processes died with the socket's other end (reset)
            return None
        if not data:
            return None
        reply: dict[str, Any] = json.loads(data)
        return reply

    @property
    def closed(self) -> bool:
        """True after :meth:`close` or once the episode's processes are gone."""
        return self._closed

    @property
    def remaining_s(self) -> float:
        """Command time left in the episode's budget."""
        return self.budget.remaining_s

    @property
    def spent(self) -> str | None:
        """Which of the episode's budgets is spent (``time``, ``output``), ``closed``, or ``None``."""
        return self.budget.spent(self._closed)

    def run(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        charge_episode: bool = True,
        checker: bool = False,
    ) -> CommandResult:
        """Run ``command`` with ``bash -c`` in the episode's root; never raises for what the command does.

        Args:
            command: Shell text.
            timeout_s: This command's wall clock (default ``command_timeout_s``), cut to the episode's budget.
            cwd: Start directory inside the sandbox (default the work dir).
            env: Environment variables of this command only, over the episode's.
            charge_episode: Count the command against the episode's time and output budgets (set-up and
                checker commands do not).
            checker: Run it as the checker: under ``checker_uid`` (which alone reads ``/tests``), in the
                episode's ``checker`` cgroup, outside every Landlock domain (no agent process can trace
                it, read or write its memory, or signal it). Call :meth:`end_agent` first so that
                nothing of the agent's runs beside it.
        """
        with self._lock:
            if self._closed:
                return CommandResult("closed", error="the episode's sandbox is closed")
            refused = self.budget.refusal() if charge_episode else None
            if refused is not None:
                return refused
            # Any str is a result, never an exception: lone surrogates become U+FFFD, NUL is refused by name.
            command = clean_text(command)
            env = {clean_text(k): clean_text(v) for k, v in (env or {}).items()}
            if "\x00" in command or "\x00" in (cwd or ""):
                return CommandResult("exit", exit_code=2, error="the command or its folder holds a NUL character")
            if len(command.encode()) > _MESSAGE_BYTES - 1000:
                return CommandResult(
                    "exit", exit_code=2, error=f"the command is longer than {_MESSAGE_BYTES - 1000} bytes"
                )
            note = self._process_limit_note()  # background processes of earlier commands may have hit it
            budget = self.budget.allowance(timeout_s or self.config.command_timeout_s, charge_episode)
            started = time.monotonic()
            result = CommandResult("closed", error="the command did not return")
            try:
                result = self._run(command, budget, cwd and clean_text(cwd), env, checker)
            finally:
                if charge_episode:  # its time counts even when it raised
                    self.budget.charge(time.monotonic() - started, len(result.stdout) + len(result.stderr))
            result.elapsed_s = time.monotonic() - started
            after = self._process_limit_note()
            if after and result.status in ("ok", "exit", "timeout"):
                result.status, result.exit_code = "killed", None
                result.error = after
            elif note:
                result.error = f"{note} (before this command)" + (f"; {result.error}" if result.error else "")
            return result

    def _run(self, command: str, budget: float, cwd: str | None, env: dict[str, str], checker: bool) -> CommandResult:
        self._next_id += 1
        request = self._next_id
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            message = json.dumps(
                {"op": "run", "id": request, "cmd": command, "cwd": cwd, "env": env, "checker": checker}
            ).encode()
            try:
                socket.send_fds(self._sock, [message], [out_w, err_w])
            except OSError as exc:
                self._closed = True
                return CommandResult("closed", error=f"the episode's sandbox is gone ({exc})")
        finally:
            os.close(out_w)
            os.close(err_w)
        cap = self.config.max_output_bytes
        captured = {out_r: bytearray(), err_r: bytearray()}  # the first `cap` bytes of each stream
        endings = {out_r: bytearray(), err_r: bytearray()}  # its last `cap - cap // 2`, shown if it runs past
        open_fds = [out_r, err_r]
        sock_fd = self._sock.fileno()
        deadline = time.monotonic() + budget
        status: Status | None = None
        exit_code: int | None = None
        exited_at: float | None = None
        try:
            while True:
                now = time.monotonic()
                if exited_at is not None and (not open_fds or now > exited_at + _DRAIN_GRACE_S):
                    break
                if status == "timeout" and exited_at is None and now > deadline + 5:
                    self._closed = True  # init never confirmed the kill: the episode cannot be trusted
                    break
                wait = (
                    exited_at + _DRAIN_GRACE_S if exited_at is not None else deadline if status is None else now + 0.1
                ) - now
                ready = select.select([*open_fds, sock_fd], [], [], max(wait, 0.0))[0]
                if not ready and status is None and exited_at is None:
                    status = "timeout"
                    self._send({"op": "kill", "id": request})
                    continue
                for fd in ready:
                    if fd == sock_fd:
                        reply = self._receive(now)
                        if reply is None:
                            self._closed = True
                            exited_at = exited_at or time.monotonic()
                            status = status or "closed"
                        elif reply.get("event") == "exit" and reply.get("id") == request:
                            exit_code, exited_at = int(reply["code"]), time.monotonic()
                        continue
                    chunk = os.read(fd, 65_536)
                    if not chunk:
                        open_fds.remove(fd)
                        continue
                    # Past the cap the command runs on (a build's log, a solution's progress); the
                    # stream's start and end are kept, its middle is read and dropped.
                    room = cap + 1 - len(captured[fd])  # one byte past the cap tells that it ran past
                    if room > 0:
                        captured[fd] += chunk[:room]
                    ending = endings[fd]
                    ending += chunk
                    del ending[: -(cap - cap // 2)]
        finally:
            os.close(out_r)
            os.close(err_r)
        stdout, stderr = (
            clean_text(keep_ends(bytes(captured[fd]), bytes(endings[fd]), cap).decode("utf-8", "replace"))
            for fd in (out_r, err_r)
        )
        return self._result(status, exit_code, stdout, stderr, budget)

    def _result(
        self, status: Status | None, code: int | None, stdout: str, stderr: str, budget: float
    ) -> CommandResult:
        if status == "timeout":
            return CommandResult(
                "timeout", stdout, stderr, None, error=f"the command ran past {budget:.3g} s and was killed"
            )
        if status == "closed":
            return CommandResult("closed", stdout, stderr, code, error="the episode's sandbox ended during the command")
        if (
            code is not None
            and code > 128
            and code - 128 in (signal.SIGKILL, signal.SIGXCPU, signal.SIGSEGV, signal.SIGXFSZ)
        ):
            name = signal.Signals(code - 128).name
            return CommandResult(
                "killed",
                stdout,
                stderr,
                code,
                error=f"the shell was killed by {name} (a CPU, memory or file-size limit)",
            )
        return CommandResult("ok" if code == 0 else "exit", stdout, stderr, code)

    def _process_limit_note(self) -> str | None:
        """Kill the episode's processes (init aside) if they hit the process limit since the last look."""
        hits = self._pid_limit_hits()
        if hits is None or hits <= self._pid_hits_seen:
            return None
        self._kill_agent()
        self._pid_hits_seen = self._pid_limit_hits() or hits
        return f"the episode's processes hit the limit of {self.config.max_procs}; all of them were killed"

    def _pid_limit_hits(self) -> int | None:
        """How often the agent's pids cgroup refused a fork (``max`` in ``pids.events``), if known."""
        if self._groups is None or self._group_name is None:
            return None
        return self._groups.pid_limit_hits(self._group_name, "agent")

    def _kill_agent(self) -> int:
        """Kill every process the agent's commands started; how many survive (0 unless the kernel refuses)."""
        if self._groups is not None and self._group_name is not None:
            return len(self._groups.kill(self._group_name, "agent"))
        # No cgroup: by uid, from init, inside the episode's pid namespace (nothing outside it is touched).
        self._send({"op": "kill_agent"})
        while True:
            reply = self._receive(time.monotonic() + 15.0)
            if reply is None:
                self._closed = True
                return 0  # the episode is gone, and every process with it
            if reply.get("event") == "killed":
                return int(reply.get("left", 0))

    def end_agent(self) -> int:
        """End the agent's part of the episode: every process its commands started is killed.

        Through the episode's cgroup (its ``agent`` part, so ``setsid``, ``nohup``, double forks and
        background loops included); where no cgroup is available, by uid inside the episode's pid
        namespace. Returns how many processes survive (0; the checker must not run otherwise).
        Later agent commands may still run (and are killed again by the next call).
        """
        with self._lock:
            if self._closed:
                return 0
            return self._kill_agent()

    def hand_over_to_checker(self) -> str | None:
        """Give the checker's uid every file and folder the agent's uid owns, and a root it may write.

        For checkers written for a container, where tests run as root and write into the work dir or
        make folders at the top (``/db``, ``/data``): call once the agent's processes are gone
        (:meth:`end_agent`), and only for checkers that do not run the agent's code through ``as-agent``
        (its files are the checker's afterwards). The episode's own file systems alone are walked, links
        are not followed, the kernel drops set-user-ID bits of files that change hands, and ``/`` becomes
        sticky and world-writable (folders can be made there, nobody's removed).

        Returns:
            ``None`` once done; else why the agent's files could not be handed over (a path of theirs past
            ``PATH_MAX``: the agent's doing).

        Raises:
            ToolError: the episode is closed or gone (nothing of the agent's doing).
        """
        with self._lock:
            if self._closed:
                raise ToolError("the episode's sandbox is closed; nothing was handed to the checker")
            layer_bytes, layer_inodes = _layers_size(self._layers)
            request = {"op": "hand_over", "layer_bytes": layer_bytes, "layer_inodes": layer_inodes}
            reply = self._ask(request, "handed", 60.0, "nothing was handed to the checker")
        error = reply.get("error")
        if error:
            filled = "the agent filled its disk: " if "[Errno 28]" in error else ""
            return f"{filled}the agent's files could not be handed to the checker: {error}"
        return None

    def agent_processes(self) -> int:
        """How many processes the agent's part holds now (``-1`` where the episode has no cgroup)."""
        if self._groups is None or self._group_name is None:
            return -1
        return len(self._groups.members(self._group_name, "agent"))

    def serve_agent(self) -> None:
        """Let the checker run programs as the agent: ``as-agent PROGRAM ARGS...`` (in ``/checker/bin``).

        The program runs as the agent's uid, in the agent's cgroup and a Landlock domain, with the
        agent's environment and the caller's stdin, stdout, stderr and folder; ``as-agent`` exits with
        its status. So a checker exercises the agent's code in another process under another uid: that
        code cannot read ``/tests`` or the checker's memory, patch the checker or print its verdict,
        and whatever it leaves running is killed when it returns.

        Raises:
            ToolError: the episode is closed or the service could not start.
        """
        self.write_file(AS_AGENT, _AS_AGENT_PROGRAM.encode(), mode=0o755)
        with self._lock:
            request = {"op": "serve_agent", "path": AS_AGENT_SOCKET}
            reply = self._ask(request, "serving", 10.0, "the checker's as-agent service did not start")
            if reply.get("error"):
                raise ToolError(f"the checker's as-agent service did not start: {reply['error']}")

    def _ask(self, request: dict[str, Any], event: str, timeout_s: float, undone: str) -> dict[str, Any]:
        """Send ``request`` to init and wait for its ``event`` reply (hold ``_lock``).

        Raises:
            ToolError: the sandbox ended or did not answer within ``timeout_s`` (``undone`` says what that left).
        """
        self._send(request)
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._receive(deadline)
            if reply is None:
                raise ToolError(f"the episode's sandbox is gone, or did not answer in {timeout_s:g} s; {undone}")
            if reply.get("event") == event:
                return reply

    def _send(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            self._sock.send(json.dumps(message).encode())

    def write_file(
        self,
        path: str,
        data: bytes,
        *,
        mode: int = 0o644,
        owned_by_agent: bool = False,
        owner: Literal["root", "agent", "checker"] | None = None,
    ) -> None:
        """Write a file inside the sandbox as root; it is owned by ``owner`` (root unless asked).

        Files under ``/tests`` are readable by the checker's uid only (the folder is its, mode 700).

        Raises:
            ToolError: the episode is closed or the write failed.
        """
        if not path.startswith("/"):
            raise ToolError(f"write_file needs an absolute path inside the sandbox, not {path!r}")
        chunk = _MESSAGE_BYTES * 3 // 4 - 1000
        with self._lock:
            if self._closed:
                raise ToolError(f"the episode's sandbox is closed; {path} was not written")
            for offset in range(0, max(len(data), 1), chunk):
                piece = base64.b64encode(data[offset : offset + chunk]).decode()
                message = {"op": "write", "path": path, "data": piece, "mode": mode, "append": offset > 0}
                message["owner"] = owner or ("agent" if owned_by_agent else "root")
                self._send(message)
                while True:
                    reply = self._receive(time.monotonic() + 10.0)
                    if reply is None:
                        raise ToolError(f"the episode's sandbox is gone; {path} was not written")
                    if reply.get("event") == "written":
                        break
                if reply.get("error"):
                    raise ToolError(f"could not write {path} in the sandbox: {reply['error']}")

    def close(self) -> None:
        """End the episode: every process, mount, cgroup and scratch file goes. Idempotent."""
        self._closed = True
        sock = getattr(self, "_sock", None)
        if sock is not None:
            # A command or write may be waiting on the socket in another thread: shut it down first (that
            # thread sees the episode end and returns ``closed``), and close the descriptor only once it has
            # let go, so it never selects on a closed (or reused) descriptor.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            lock = getattr(self, "_lock", None)
            held = lock.acquire(timeout=15.0) if lock is not None else False
            try:
                with contextlib.suppress(OSError):
                    sock.close()
            finally:
                if held and lock is not None:
                    lock.release()
        alive = getattr(self, "_alive", None)
        unended = None
        if alive is not None:
            unended = self._await_namespace_end(alive)
            os.close(alive)
            self._alive = None
        keeper_fd = getattr(self, "_keeper_fd", None)
        if keeper_fd is not None:
            os.close(keeper_fd)
            self._keeper_fd = None
        if self._groups is not None and self._group_name is not None:
            self._groups.remove(self._group_name)
            self._group_name = None
        with contextlib.suppress(OSError):
            os.rmdir(self._scratch)  # empty on the host: the tmpfs lived in the episode's mount namespace
        if unended is not None:
            raise ToolError(unended)

    def _await_namespace_end(self, alive: int) -> str | None:
        """Wait until the episode's pid namespace is empty (the keeper closes ``alive`` once init is reaped).

        Init exits when it sees the socket close. One that does not (stopped, or starved on a loaded host)
        is killed by its keeper on SIGTERM, and the keeper still waits for it, so the pipe closes only once
        the kernel has killed and reaped every process of the namespace. Killing the keeper instead would
        close the pipe at once, while init and the agent's processes were still dying.

        Returns:
            ``None`` once the namespace is empty; else why it is not (every bound passed).
        """
        if select.select([alive], [], [], CLOSE_GRACE_S)[0]:
            return None
        # The keeper is alive while the pipe is open (it holds the write end), so its pid is still its own.
        keeper_fd = getattr(self, "_keeper_fd", None)
        with contextlib.suppress(OSError):
            if keeper_fd is not None:
                signal.pidfd_send_signal(keeper_fd, signal.SIGTERM)
            elif self._keeper is not None:
                os.kill(self._keeper, signal.SIGTERM)
        if select.select([alive], [], [], CLOSE_KILL_WAIT_S)[0]:
            return None
        return (
            f"episode sandbox: its init did not end within {CLOSE_GRACE_S + CLOSE_KILL_WAIT_S:.0f} s of the "
            f"close (keeper pid {self._keeper}); processes of uid {self.config.uid} may still be running"
        )

    def __enter__(self) -> EpisodeSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if not self._closed:
                self.close()
