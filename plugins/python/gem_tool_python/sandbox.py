"""A sandbox for model-written Python: isolated processes from a pool of warm workers.

Every call runs in a fresh worker process that was started (and confined) ahead of
time, so a call costs a pipe round trip instead of an interpreter start-up. A worker
runs exactly one program and is then destroyed with everything it started; the pool
starts a replacement in the background. See ``docs/tools.md`` for the guarantees.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import queue
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gem_core.errors import SandboxIsolationWarning, ToolError
from gem_core.tools.safety import clean_text
from gem_tool_python.cgroups import CallCgroups
from gem_tool_python.cgroups import detect as detect_cgroups

__all__ = ["Isolation", "SandboxConfig", "SandboxPool", "SandboxResult", "detect_isolation"]

#: ``namespaces``: own mount/net/pid/ipc/uts namespaces, a fresh unprivileged uid, rlimits.
#: ``uid``: a fresh unprivileged uid and rlimits, no namespaces (network stays reachable).
#: ``rlimits``: rlimits and a new session only (the code runs as the host user).
Isolation = Literal["namespaces", "uid", "rlimits"]
_LEVELS: tuple[Isolation, ...] = ("namespaces", "uid", "rlimits")
_WORKER = str(Path(__file__).with_name("_worker.py"))
_warned: set[str] = set()
#: Linux pipes hold 64 KiB by default; smaller programs are written in one non-blocking go.
_PIPE_BUFFER = 60_000
_warn_lock = threading.Lock()
_MAX_UID = 4_294_967_294
#: Threads starting workers in parallel (at most one per warm worker): a start is mostly waiting on
#: the kernel (namespaces, mounts), so every worker a burst of calls used up is started at once.
_SPAWNERS = 8
#: How often a running call's cgroup is checked for an OOM kill (the call then dies whole).
_OOM_POLL_S = 0.05
#: While other workers are ready, a taken worker's replacement starts when its call ends or after
#: this long, whichever comes first: a short call then runs without a start competing for the CPU.
_REPLACE_AFTER_S = 0.02


#: What a model's program commonly imports; those installed are readable in the sandbox.
DEFAULT_PACKAGES: tuple[str, ...] = (
    "numpy",
    "sympy",
    "mpmath",
    "scipy",
    "pandas",
    "networkx",
    "regex",
    "sortedcontainers",
)


class SandboxConfig(BaseModel):
    """Limits and pool settings of the Python sandbox (validated; errors name the field).

    Attributes:
        timeout_s: Wall-clock limit of one call; the program and its children are killed at it.
        cpu_s: CPU seconds per process (SIGXCPU, then SIGKILL one second later).
        memory_mb: Address-space limit per process.
        max_procs: Processes and threads the program may have at once (binds when the code
            runs under its own uid, i.e. isolation ``namespaces`` or ``uid``).
        max_file_mb: Largest file the program may write.
        tmpfs_mb: Size of the private ``/tmp`` (the work dir lives there) in namespace mode.
        max_output_bytes: Captured stdout (and, separately, stderr); past it the program is killed.
        max_open_files: File descriptors per process.
        pool_size: Warm workers kept ready.
        isolation: ``auto`` picks the strongest level the machine allows and warns once when
            it falls back; naming a level fails if it is unavailable.
        python: Interpreter for the workers (default: the host's ``sys.executable``).
        preimport: Modules imported by each worker before it is marked ready (their distributions
            are readable in the sandbox too).
        packages: Distributions the program may import, with everything they require (missing
            ones are skipped). In namespace mode nothing else of the site-packages directories
            is visible; the other levels cannot hide files.
        expose: Further host paths the program may read (read-only, namespace mode).
        env: Extra environment variables for the program (the host environment is never passed).
        uid_base: First uid of the range handed out to calls. Every call on the machine gets the
            next uid of one counter shared by all pools and processes (a root-only file under
            ``/run``), so no two calls share a uid until the range wraps.
        uid_count: Size of that range (a billion: years of calls before it wraps).
        spawn_timeout_s: How long a call waits for a worker before failing.
        cgroups: Give each call its own cgroup (memory, shared memory included, and pids) where
            the host allows it (see :attr:`SandboxPool.cgroups`); rlimits apply either way.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(5.0, gt=0)
    cpu_s: int = Field(5, ge=1)
    memory_mb: int = Field(512, ge=64)
    max_procs: int = Field(32, ge=1)
    max_file_mb: int = Field(16, ge=1)
    tmpfs_mb: int = Field(64, ge=1)
    max_output_bytes: int = Field(16_384, ge=256)
    max_open_files: int = Field(256, ge=16)
    pool_size: int = Field(2, ge=1, le=64)
    isolation: Literal["auto", "namespaces", "uid", "rlimits"] = "auto"
    python: str | None = None
    preimport: tuple[str, ...] = ()
    packages: tuple[str, ...] = DEFAULT_PACKAGES
    expose: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    uid_base: int = Field(1_500_000_000, ge=1000, le=4_000_000_000)
    uid_count: int = Field(1_000_000_000, ge=16)
    spawn_timeout_s: float = Field(30.0, gt=0)
    cgroups: bool = True

    @model_validator(mode="after")
    def _uids_fit(self) -> SandboxConfig:
        if self.uid_base + self.uid_count > _MAX_UID:
            raise ValueError(f"uid_base + uid_count must not exceed {_MAX_UID} (the largest usable uid)")
        return self


Status = Literal["ok", "error", "exit", "timeout", "cpu_limit", "output_limit", "killed", "crashed"]


@dataclass
class SandboxResult:
    """What one sandboxed program did.

    Attributes:
        status: ``ok``; ``error`` (uncaught exception); ``exit`` (non-zero ``sys.exit``);
            ``timeout`` (wall clock); ``cpu_limit``; ``output_limit``; ``killed`` (SIGKILL:
            hard CPU or memory limit); ``crashed`` (other signal or lost worker).
        stdout: Captured standard output (at most ``max_output_bytes``).
        stderr: Captured standard error (same cap).
        error: Message for the model; ``None`` when ``status == "ok"``.
        elapsed_s: Wall-clock seconds from handing over the code to the result.
        isolation: The isolation level the program ran under.
        exit_code: Exit code of the worker (``128 + signal`` when killed), if known.
        uid: The uid the program ran as.
    """

    status: Status
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    elapsed_s: float = 0.0
    isolation: Isolation = "rlimits"
    exit_code: int | None = None
    uid: int | None = None

    @property
    def ok(self) -> bool:
        """True when the program finished without error."""
        return self.status == "ok"


def _warn_once(level: Isolation, reason: str) -> None:
    with _warn_lock:
        if level in _warned:
            return
        _warned.add(level)
    missing = {
        "uid": "no network isolation and no private /tmp",
        "rlimits": f"no network isolation, no private /tmp, and the code runs as the host user (uid "
        f"{os.geteuid()}{', root!' if os.geteuid() == 0 else ''}); processes are bounded only by that "
        "user's RLIMIT_NPROC, and children that leave the session can outlive the call",
    }[level]
    warnings.warn(
        f"python sandbox: Linux namespaces are unavailable ({reason}); falling back to isolation "
        f"{level!r}: {missing}. Run as root (or with CAP_SYS_ADMIN and CAP_SETUID) for full isolation.",
        SandboxIsolationWarning,
        stacklevel=3,
    )


class _Worker:
    """One confined worker (keeper, monitor and runner processes) waiting for its program."""

    def __init__(self, fds: tuple[int, int, int, int], uid: int | None, level: Isolation) -> None:
        self.stdin, self.stdout, self.stderr, self.ctrl = fds
        self.uid = uid
        self.level = level
        self.monitor: int | None = None  # pidfd of the monitor process
        self.runner_pid: int | None = None
        self.workdir: str | None = None
        self.cgroups: CallCgroups | None = None
        self.cgroup: str | None = None
        self._buffer = b""
        self._pushback: list[dict[str, Any]] = []
        self._eof = False

    def oom_kills(self) -> int | None:
        """Processes of this call the kernel killed for the call's memory limit (``None``: no cgroup counts them)."""
        if self.cgroups is None or self.cgroup is None:
            return None
        return self.cgroups.oom_kills(self.cgroup)

    def read_event(self, deadline: float) -> dict[str, Any] | None:
        """The next control message, waiting until the deadline; ``None`` on EOF or timeout."""
        while True:
            events, eof = self.pending_events()
            if events:
                self._pushback = events[1:] + self._pushback
                return events[0]
            if eof:
                return None
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.ctrl], [], [], left)[0]:
                return None
            self._fill()

    def pending_events(self) -> tuple[list[dict[str, Any]], bool]:
        """Complete control messages received so far (never blocks), and whether the pipe hit EOF.

        Once the program runs it shares the control pipe, so anything may arrive: lines that
        are not JSON objects are dropped, and the caller trusts no field of what remains.
        """
        events, self._pushback = self._pushback, []
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                events.append(event)
        return events, self._eof

    def _fill(self) -> None:
        chunk = os.read(self.ctrl, 65_536)
        if not chunk:
            self._eof = True
        elif len(self._buffer) < 1 << 20:  # a program spamming the pipe cannot exhaust memory
            self._buffer += chunk

    def alive(self) -> bool:
        return self.monitor is not None and not select.select([self.monitor], [], [], 0)[0]

    def kill(self) -> None:
        """Kill the program and every process it started (asynchronously; see :meth:`dispose`)."""
        if self.level != "namespaces" and self.runner_pid is not None:
            # Once only: after the runner is gone its pid may be reused.
            pgid, self.runner_pid = self.runner_pid, None
            with contextlib.suppress(OSError):
                os.killpg(pgid, signal.SIGKILL)
        if self.monitor is not None:
            # Namespaces: killing pid 1 kills the whole pid namespace. Fallback: the monitor
            # kills the runner's session and every process of the call's uid, then exits.
            sig = signal.SIGKILL if self.level == "namespaces" else signal.SIGUSR1
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.monitor, sig)

    def dispose(self) -> None:
        """Kill, wait until the monitor is gone, close pipes, remove the work dir; idempotent."""
        self.kill()
        if self.monitor is not None:
            # The monitor's pidfd turns readable once it has exited; in a pid namespace that
            # happens only after every other process in the namespace has been reaped.
            if not select.select([self.monitor], [], [], 5.0)[0]:
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(self.monitor, signal.SIGKILL)
            os.close(self.monitor)
            self.monitor = None
        for fd in (self.stdin, self.stdout, self.stderr, self.ctrl):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.stdin = self.stdout = self.stderr = self.ctrl = -1
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        if self.cgroups is not None and self.cgroup is not None:
            self.cgroups.remove(self.cgroup)
            self.cgroup = None


class _Replacement:
    """The replacement a pool owes for a worker taken from it; asked for once (the call's thread only)."""

    def __init__(self, wanted: threading.Semaphore, due: float) -> None:
        self.wanted = wanted
        self.due = due  # monotonic time by which it is asked for at the latest
        self.asked = False

    def ask(self) -> None:
        if not self.asked:
            self.asked = True
            self.wanted.release()


class _Zygote:
    """The fork server process that starts workers (see ``_worker.zygote``)."""

    def __init__(self, python: str, env: dict[str, str], config: SandboxConfig, *, confine: bool) -> None:
        host_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        timeout_s = config.spawn_timeout_s
        cfg = {
            "socket_fd": child_end.fileno(),
            "preimport": list(config.preimport),
            "packages": list(config.packages),
            "expose": list(config.expose),
            "confine": confine,
        }
        self.confine = confine
        #: ``"confined"`` once the fork server lives in the allow-listed root, else why not.
        self.confined = "not asked to confine"
        try:
            self.popen = subprocess.Popen(
                [python, "-I", "-B", _WORKER, json.dumps(cfg)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(child_end.fileno(),),
                env=env,
                cwd="/",
                start_new_session=True,
            )
        except OSError as exc:
            host_end.close()
            raise ToolError(f"cannot start the sandbox interpreter {python!r}: {exc}") from exc
        finally:
            child_end.close()
        self.sock = host_end
        self.lock = threading.Lock()
        host_end.settimeout(timeout_s)
        try:
            hello = json.loads(host_end.recv(4096))
            ok = hello.get("ready") is True
            self.confined = str(hello.get("confined") or self.confined)
        except (OSError, ValueError, AttributeError):
            ok = False
        if not ok:
            self.close()
            assert self.popen.stderr is not None
            lines = self.popen.stderr.read().decode("utf-8", "replace").strip().splitlines()
            raise ToolError(f"the sandbox fork server failed to start: {lines[-1] if lines else 'no reason given'}")
        host_end.settimeout(None)
        assert self.popen.stderr is not None
        self.popen.stderr.close()

    def fork(self, request: dict[str, Any], fds: list[int]) -> None:
        with self.lock:
            if self.popen.poll() is not None:
                raise ToolError(f"the sandbox fork server died (exit code {self.popen.returncode})")
            socket.send_fds(self.sock, [json.dumps(request).encode()], fds)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


class SandboxPool:
    """Runs Python programs in isolated one-shot workers taken from a warm pool.

    Thread-safe; :meth:`run` blocks, :meth:`arun` awaits (from any event loop). Workers are
    forked by a fork server that has already imported the interpreter's start-up modules
    (and ``preimport``), so replacing a used worker costs a few milliseconds.

    Args:
        config: Limits and pool settings.
        **overrides: Fields of :class:`SandboxConfig` merged over ``config``.

    Raises:
        pydantic.ValidationError: bad settings (``make_tool`` turns it into a
            :class:`~gem_core.errors.ConfigError` naming the field).
    """

    def __init__(self, config: SandboxConfig | None = None, **overrides: Any) -> None:
        base = config or SandboxConfig()
        self.config = SandboxConfig.model_validate({**base.model_dump(), **overrides}) if overrides else base
        self.python = self.config.python or sys.executable
        self._ready: queue.Queue[_Worker] = queue.Queue()
        self._wanted = threading.Semaphore(0)
        self._closed = threading.Event()
        self._spawn_error: str | None = None
        self._threads: list[threading.Thread] = []
        self._reaper: threading.Thread | None = None
        self._retired: queue.Queue[_Worker | None] = queue.Queue()
        self._executor: ThreadPoolExecutor | None = None
        self._start_lock = threading.Lock()
        self._zygote: _Zygote | None = None
        self._zygote_lock = threading.Lock()
        self.isolation: Isolation | None = None
        self._confine = self.config.isolation in ("auto", "namespaces") and os.geteuid() == 0
        self._cgroups: CallCgroups | None = None
        #: Per-call cgroups in use (``"cgroup v2"``/``"cgroup v1"``), or why there are none.
        self.cgroups = "not started"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> SandboxPool:
        """Pick the isolation level and start the warm workers; idempotent.

        Raises:
            ToolError: the pool is closed, the interpreter cannot start, or the requested
                isolation level is unavailable on this machine.
        """
        with self._start_lock:
            if self._closed.is_set():
                raise ToolError("the sandbox pool is closed; create a new one")
            if self.isolation is not None:
                return self
            if self.config.cgroups and os.geteuid() == 0:
                self._cgroups, self.cgroups = detect_cgroups(self.config.memory_mb << 20, self.config.max_procs + 1)
            else:
                self.cgroups = "off (cgroups=False)" if not self.config.cgroups else "needs root"
            self._zygote = _Zygote(self.python, self._program_env(), self.config, confine=self._confine)
            try:
                first = self._probe()
            except ToolError:
                self._zygote.close()
                self._zygote = None
                raise
            self._ready.put(first)
            for _ in range(self.config.pool_size - 1):
                self._wanted.release()
            # Several spawners: a worker's start-up is mostly waiting on its own processes, so starts
            # overlap and back-to-back calls drain the warm pool less.
            for index in range(min(self.config.pool_size, _SPAWNERS)):
                thread = threading.Thread(target=self._spawn_loop, name=f"gem-sandbox-spawner-{index}", daemon=True)
                thread.start()
                self._threads.append(thread)
            self._reaper = threading.Thread(target=self._reap_loop, name="gem-sandbox-reaper", daemon=True)
            self._reaper.start()
        return self

    def _zygote_for(self, level: Isolation) -> None:
        """Use a fork server in the allow-listed root for namespaces, an unconfined one otherwise."""
        with self._zygote_lock:
            assert self._zygote is not None
            confine = level == "namespaces"
            if self._zygote.confine != confine:
                self._zygote.close()
                self._zygote = _Zygote(self.python, self._program_env(), self.config, confine=confine)
            self._confine = confine
            if confine and self._zygote.confined != "confined":
                raise ToolError(f"cannot build the sandbox's root: {self._zygote.confined}")

    def _probe(self) -> _Worker:
        requested = self.config.isolation
        candidates = _LEVELS if requested == "auto" else (requested,)
        reasons: list[str] = []
        for level in candidates:
            if level in ("namespaces", "uid") and os.geteuid() != 0:
                reasons.append(f"{level}: needs root (running as uid {os.geteuid()})")
                continue
            self.isolation = level
            try:
                self._zygote_for(level)
                worker = self._spawn()
            except ToolError as exc:
                reasons.append(f"{level}: {exc}")
                continue
            if requested == "auto" and level != "namespaces":
                _warn_once(level, "; ".join(reasons))
            return worker
        self.isolation = None
        raise ToolError(f"python sandbox: isolation {requested!r} is unavailable here: " + "; ".join(reasons))

    def close(self) -> None:
        """Kill the idle workers and the fork server; idempotent."""
        self._closed.set()
        threads, self._threads = self._threads, []
        self._wanted.release(max(len(threads), 1))
        for thread in threads:
            thread.join(timeout=10)
        if self._reaper is not None:
            self._retired.put(None)
            self._reaper.join(timeout=30)
            self._reaper = None
        while True:
            try:
                self._ready.get_nowait().dispose()
            except queue.Empty:
                break
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def __enter__(self) -> SandboxPool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ workers
    def _live_zygote(self) -> _Zygote:
        """The fork server, restarted if it died (it never runs programs, but it can be killed)."""
        with self._zygote_lock:
            if self._zygote is None:
                raise ToolError("the sandbox pool is not started")
            if self._zygote.popen.poll() is not None and not self._closed.is_set():
                self._zygote.close()
                self._zygote = _Zygote(self.python, self._program_env(), self.config, confine=self._confine)
            return self._zygote

    def _spawn(self) -> _Worker:
        level, zygote, cfg = self.isolation, self._live_zygote(), self.config
        if level is None:
            raise ToolError("the sandbox pool is not started")
        uid = None
        if level != "rlimits":
            uid = _allocate_uid(self.config.uid_base, self.config.uid_count)
        workdir = None
        if level != "namespaces":
            workdir = tempfile.mkdtemp(prefix="gem-sandbox-")
            if uid is not None:
                os.chown(workdir, uid, uid)
        request = {
            "namespaces": level == "namespaces",
            "uid": uid,
            "workdir": workdir,
            "cpu_s": cfg.cpu_s,
            "memory_bytes": cfg.memory_mb << 20,
            "nproc": cfg.max_procs,
            "fsize_bytes": cfg.max_file_mb << 20,
            "nofile": cfg.max_open_files,
            "tmpfs_bytes": cfg.tmpfs_mb << 20,
            "env": self._program_env(),
        }
        pipes = [os.pipe() for _ in range(4)]  # stdin, stdout, stderr, control
        ours = (pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][0])
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1]]
        worker = _Worker(ours, uid, level)
        worker.workdir = workdir
        try:
            if self._cgroups is not None:
                worker.cgroups = self._cgroups
                worker.cgroup, cgroup_fds = self._cgroups.create()
                theirs += cgroup_fds
                request["cgroups"] = len(cgroup_fds)
            zygote.fork(request, theirs)
        except (OSError, ToolError) as exc:
            worker.dispose()
            raise ToolError(f"cannot start a sandbox worker: {exc}") from exc
        finally:
            for fd in theirs:
                os.close(fd)
        deadline = time.monotonic() + cfg.spawn_timeout_s
        ready = False
        # "monitor", "runner" and "ready" come from different processes, in any order. Only now,
        # before the program runs, are the pids in them trustworthy.
        while not (ready and worker.monitor is not None and (level == "namespaces" or worker.runner_pid)):
            event = worker.read_event(deadline)
            kind = None if event is None else event.get("event")
            if event is None or kind == "failed":
                worker.dispose()
                raise ToolError(f"sandbox worker failed to start: {(event or {}).get('error', 'no ready message')}")
            if kind == "monitor":
                try:
                    worker.monitor = os.pidfd_open(int(event["pid"]))
                except ProcessLookupError:
                    worker.dispose()
                    raise ToolError("sandbox worker failed to start: its monitor process vanished") from None
            elif kind == "runner":
                worker.runner_pid = int(event["pid"])
            elif kind == "ready":
                ready = True
        return worker

    def _program_env(self) -> dict[str, str]:
        bin_dir = os.path.dirname(self.python)
        return {
            "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONIOENCODING": "utf-8",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "MPLBACKEND": "Agg",
            **self.config.env,
        }

    def _spawn_loop(self) -> None:
        backoff = 0.05
        while True:
            self._wanted.acquire()
            if self._closed.is_set():
                return
            try:
                worker = self._spawn()
            except ToolError as exc:
                self._spawn_error = str(exc)
                self._wanted.release()
                time.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            backoff, self._spawn_error = 0.05, None
            if self._closed.is_set():
                worker.dispose()
                return
            self._ready.put(worker)

    def _take(self) -> tuple[_Worker, _Replacement]:
        """A ready worker, and the replacement the pool owes for it (already asked for when none is left ready)."""
        self.start()
        deadline = time.monotonic() + self.config.spawn_timeout_s
        while True:
            try:
                worker = self._ready.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                reason = f": {self._spawn_error}" if self._spawn_error else ""
                waited = f"{self.config.spawn_timeout_s:g}s"
                raise ToolError(f"no sandbox worker became ready within {waited}{reason}") from None
            replacement = _Replacement(self._wanted, time.monotonic() + _REPLACE_AFTER_S)
            if worker.alive():
                if self._ready.empty():  # the next call would wait: start the replacement now
                    replacement.ask()
                return worker, replacement
            replacement.ask()
            worker.dispose()

    # ------------------------------------------------------------------ calls
    def run(self, code: str, *, timeout_s: float | None = None) -> SandboxResult:
        """Run ``code`` as a script in a fresh sandboxed worker and wait for the result.

        Args:
            code: Python source; its stdout and stderr are captured.
            timeout_s: Wall-clock limit (default ``config.timeout_s``).

        Returns:
            The result; failures of the program are in ``status``/``error``, never raised.

        Raises:
            ToolError: the pool is closed or no worker could be started.
        """
        if self._closed.is_set():
            raise ToolError("the sandbox pool is closed; create a new one")
        worker, replacement = self._take()
        try:
            result = self._execute(worker, code, timeout_s or self.config.timeout_s, replacement)
        except BaseException:
            worker.dispose()
            raise
        finally:
            replacement.ask()
        # The program and its processes already got SIGKILL in _execute; waiting for them to be
        # reaped (and removing a fallback work dir) happens off the caller's critical path.
        self._retired.put(worker)
        return result

    def _reap_loop(self) -> None:
        while True:
            worker = self._retired.get()
            if worker is None:
                return
            worker.dispose()

    async def arun(self, code: str, *, timeout_s: float | None = None) -> SandboxResult:
        """Async :meth:`run`; the blocking work happens in the pool's own threads."""
        with self._start_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=32, thread_name_prefix="gem-sandbox-call")
            executor = self._executor
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, lambda: self.run(code, timeout_s=timeout_s))

    def _execute(self, worker: _Worker, code: str, timeout_s: float, replacement: _Replacement) -> SandboxResult:
        cap = self.config.max_output_bytes
        captured = {worker.stdout: bytearray(), worker.stderr: bytearray()}
        start = time.monotonic()
        deadline = start + timeout_s
        status: Status | None = None
        error: str | None = None
        exit_code: int | None = None
        stdin, worker.stdin = worker.stdin, -1
        data = clean_text(code).encode()  # a lone surrogate in model text must not raise
        writer: threading.Thread | None = None
        if len(data) < _PIPE_BUFFER:  # fits in the pipe: write it without blocking
            _feed(stdin, data)
        else:  # a large program fills the pipe: feed it from a thread while we read output
            writer = threading.Thread(target=_feed, args=(stdin, data), daemon=True)
            writer.start()
        open_fds = [worker.stdout, worker.stderr, worker.ctrl]
        watch_oom = worker.oom_kills() is not None  # a per-call cgroup that counts OOM kills
        next_poll = start + _OOM_POLL_S
        while status is None and worker.ctrl in open_fds:
            now = time.monotonic()
            left = deadline - now
            if left <= 0:
                status, error = "timeout", f"timed out after {timeout_s:g}s (wall clock); the program was killed"
                break
            wait = min(left, max(next_poll - now, 0)) if watch_oom else left
            if not replacement.asked:
                wait = min(wait, max(replacement.due - now, 0))
            ready = select.select(open_fds, [], [], wait)[0]
            now = time.monotonic()
            if not replacement.asked and now >= replacement.due:
                replacement.ask()
            if watch_oom and now >= next_poll:  # every 50 ms, not after every event (each read is three syscalls)
                next_poll = now + _OOM_POLL_S
                if worker.oom_kills():
                    break  # the call went over its memory limit: it dies whole (status set below)
            for fd in ready:
                if fd == worker.ctrl:
                    worker._fill()
                    events, eof = worker.pending_events()
                    for event in events:  # possibly forged by the program: only read, never act on pids
                        kind = event.get("event")
                        if kind == "done" and status is None:
                            status = _done_status(event)
                            error = None if status == "ok" else str(event.get("error"))[:cap]
                        elif kind == "exit" and status is None:  # the runner died without reporting
                            reported = event.get("code")
                            exit_code = reported if isinstance(reported, int) and 0 <= reported < 512 else None
                            status, error = _death_status(exit_code, self.config)
                    if eof:  # the monitor is gone
                        open_fds.remove(fd)
                    continue
                chunk = os.read(fd, 65_536)
                if not chunk:
                    open_fds.remove(fd)
                    continue
                captured[fd] += chunk
                if len(captured[fd]) > cap:
                    status = "output_limit"
                    error = (
                        f"output limit exceeded: more than {cap} bytes; "
                        "the output was truncated and the program was killed"
                    )
        kills = worker.oom_kills() if watch_oom and status != "output_limit" else None
        if kills:
            # However the memory was spread over processes, and whatever the survivors did next.
            status, error = "killed", _memory_error(self.config, kills)
        if status is None:
            status, error = "crashed", "the sandbox lost the program's process"
        if writer is not None:
            writer.join(timeout=1.0)
        worker.kill()
        # The runner flushes before it reports, so its output is already in the pipes: take what
        # is there without waiting for the killed processes to close them.
        _drain([fd for fd in open_fds if fd != worker.ctrl], captured, cap, time.monotonic())
        return SandboxResult(
            status=status,
            stdout=captured[worker.stdout][:cap].decode("utf-8", "replace"),
            stderr=captured[worker.stderr][:cap].decode("utf-8", "replace"),
            error=error,
            elapsed_s=time.monotonic() - start,
            isolation=worker.level,
            exit_code=exit_code,
            uid=worker.uid,
        )


#: Candidate homes of the machine-wide uid counter; the first usable one wins.
_COUNTER_DIRS = ("/run/gem-sandbox", "/dev/shm/gem-sandbox-root", "/var/tmp/gem-sandbox-root")
_counter_lock = threading.Lock()
_counter: dict[str, Any] = {}


def _counter_fd() -> int | None:
    """An open counter file in a root-owned, root-only directory (never one another user could plant)."""
    if "fd" in _counter:
        return int(_counter["fd"])
    for folder in _COUNTER_DIRS:
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            info = os.lstat(folder)
            if not os.path.isdir(folder) or os.path.islink(folder) or info.st_uid != 0 or info.st_mode & 0o077:
                continue
            fd = os.open(os.path.join(folder, "next-uid"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            continue
        _counter["fd"] = fd
        return fd
    return None


def _allocate_uid(base: int, count: int) -> int:
    """The next uid of the machine-wide counter (flock-ed file), shared by every pool and process.

    Without a usable counter file (no writable root-only directory) the uid comes from a
    per-process counter started at a random point of the range, and uniqueness across
    processes becomes only probable.
    """
    with _counter_lock:
        fd = _counter_fd()
        if fd is None:
            start = _counter.setdefault("local", secrets.randbelow(count))
            _counter["local"] = start + 1
            return base + start % count
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            text = os.pread(fd, 32, 0).strip()
            number = int(text) if text.isdigit() else 0
            os.pwrite(fd, f"{number + 1:<24}".encode(), 0)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    return base + number % count


def _feed(fd: int, data: bytes) -> None:
    """Write the program and close the pipe (this thread owns ``fd``)."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:  # the worker died before reading everything
        pass
    finally:
        os.close(fd)


def _drain(fds: list[int], captured: dict[int, bytearray], cap: int, deadline: float) -> None:
    """Read what is in the pipes, until EOF, or until nothing is ready at the deadline."""
    while fds:
        ready = select.select(fds, [], [], max(deadline - time.monotonic(), 0))[0]
        if not ready:
            return
        for fd in ready:
            chunk = os.read(fd, 65_536)
            if not chunk:
                fds.remove(fd)
            elif len(captured[fd]) <= cap:
                captured[fd] += chunk


def _memory_error(config: SandboxConfig, kills: int | None) -> str:
    return (
        f"the program was killed: its processes together went over the call's memory limit "
        f"({config.memory_mb} MiB, shared memory included; the kernel killed {kills} of them, the sandbox the rest)"
    )


def _done_status(event: dict[str, Any]) -> Status:
    status = event.get("status")
    return status if status in ("ok", "error", "exit") else "crashed"


def _death_status(exit_code: int | None, config: SandboxConfig) -> tuple[Status, str]:
    """Explain a worker that died before reporting, from its exit code (128 + signal)."""
    if exit_code is not None and exit_code < 0:  # the outer process itself was signalled
        exit_code = 128 - exit_code
    if exit_code is None or exit_code <= 128:
        return "crashed", f"the program's process died unexpectedly (exit code {exit_code})"
    sig = exit_code - 128
    name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
    if sig == signal.SIGXCPU:
        return "cpu_limit", f"CPU time limit exceeded ({config.cpu_s}s); the program was killed"
    if sig == signal.SIGKILL:
        return "killed", (
            f"the program was killed (SIGKILL): it hit the CPU hard limit ({config.cpu_s + 1}s) "
            f"or the memory limit ({config.memory_mb} MiB; with cgroups for all its processes and "
            "shared memory together)"
        )
    return "crashed", f"the program died from {name}"


def detect_isolation() -> Isolation:
    """The isolation level ``isolation="auto"`` would pick on this machine (starts one worker)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxIsolationWarning)
        pool = SandboxPool(pool_size=1)
        try:
            pool.start()
            assert pool.isolation is not None
            return pool.isolation
        finally:
            pool.close()
