"""Episode sandbox process: one writable root and one set of namespaces for a whole episode.

Started once per host process as ``python -I -S -B _episode_worker.py FD`` by
:mod:`gem_tool_python.episode`: a fork server (*zygote*) that pays the interpreter start-up and the
imports once. Each episode is one request on the socket ``FD``: the settings (JSON, never in argv,
where ``ps`` shows them) with descriptors attached: the episode's socket, a pipe whose write end the
keeper holds until everything of the episode is gone, and the episode's ``cgroup.procs`` files.
Stdlib only; the isolation primitives (rlimits, seccomp, keyrings, mount helpers) come from the
one-shot sandbox's :mod:`_worker`, imported from this folder. Process tree::

    zygote (root)                 forks one keeper per request; exits when the host's socket end closes
      └─ keeper (root)            joins the episode's cgroups, unshare(mount, net, pid, ipc, uts), fork, wait
           └─ init                pid 1: tmpfs scratch (the disk cap), overlay of the task's layers at the
                │                 work dir, read-only system binds, pivot_root; serves requests, reaps
                └─ command        one per request: new session, rlimits, the episode's uid, no_new_privs,
                                  seccomp; exec ``/bin/bash -c CMD`` with the host's pipes as stdout/stderr

Requests and replies are one JSON object per SOCK_SEQPACKET message on the episode's socket:
``{"op": "run", "id", "cmd", "cwd", "env", "checker"}`` (two descriptors attached: stdout and stderr),
``{"op": "kill", "id"}``, ``{"op": "kill_all"}``, ``{"op": "write", "path", "data" (base64), "mode", "append"}``.
Replies: ``{"event": "keeper", "pid"}`` (its host pid), ``{"event": "ready"}``, ``{"event": "failed", "error"}``,
``{"event": "exit", "id", "code"}``,
``{"event": "written", "error"}``. When the host closes the socket init exits, and the kernel kills
every process left in the pid namespace; the mounts die with the mount namespace.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import fcntl
import json
import os
import select
import signal
import socket
import stat
import struct
import sys
import time
from typing import Any

# Everything is imported here, in the fork server: after pivot_root the host's library folders are gone.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _worker

_NEW_NAMESPACES = (
    _worker.CLONE_NEWNS | _worker.CLONE_NEWNET | _worker.CLONE_NEWPID | _worker.CLONE_NEWIPC | _worker.CLONE_NEWUTS
)
MS_RDONLY = _worker.MS_RDONLY
#: Pseudo-terminals an episode may hold at once (its devpts instance's ``max``).
_MAX_PTYS = 64


def _reply(sock: socket.socket, **message: Any) -> None:
    with contextlib.suppress(OSError):
        sock.send(json.dumps(message).encode())


def zygote(server_fd: int) -> None:
    """Fork one keeper per request until the host closes the socket or dies (its end closes: EOF).

    No parent-death signal here: it fires when the *thread* that started us exits, and the host may
    start the server from a pool thread that ends long before its episodes.
    """
    server = socket.socket(fileno=server_fd)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # keepers are reaped by the kernel
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(server, 1 << 20, 2 + 3 * _worker.MAX_CGROUP_FDS)
        except OSError:
            os._exit(0)
        if not message:
            os._exit(0)
        parent = os.getpid()
        if len(fds) >= 2 and os.fork() == 0:
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                server.close()
                keeper(json.loads(message), fds[0], fds[1], fds[2:], parent)
            finally:
                os._exit(1)
        for fd in fds:
            os.close(fd)


def keeper(cfg: dict[str, Any], sock_fd: int, alive_fd: int, cgroup_fds: list[int], parent: int) -> None:
    """Join the cgroups, enter new namespaces, run init, exit with it (``alive_fd`` closes last)."""
    _worker._die_with_parent(parent)
    sock = socket.socket(fileno=sock_fd)
    _reply(sock, event="keeper", pid=os.getpid())
    counts = cfg.get("cgroup_fds", {"init": len(cgroup_fds), "agent": 0, "checker": 0})
    init_fds = cgroup_fds[: counts["init"]]
    cfg["agent_fds"] = cgroup_fds[counts["init"] : counts["init"] + counts["agent"]]
    cfg["checker_fds"] = cgroup_fds[counts["init"] + counts["agent"] :]
    for fd in init_fds:
        os.write(fd, b"0")
        os.close(fd)
    try:
        _worker._check(_worker._libc.unshare(_NEW_NAMESPACES), "unshare")
    except OSError as exc:
        _reply(sock, event="failed", error=str(exc))
        os._exit(3)
    me = os.getpid()
    child = [0]
    # The host's way to end an episode whose init does not see the socket close (stopped, starved): SIGTERM
    # to the keeper, which kills init and goes on waiting, so ``alive_fd`` still closes only once the kernel
    # has emptied the pid namespace. (Killing the keeper instead closes it while init is still dying.)
    signal.signal(signal.SIGTERM, lambda *_: os.kill(child[0], signal.SIGKILL))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # held until ``child`` names init
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        os.close(alive_fd)
        try:
            init(cfg, sock, me)
        except BaseException as exc:
            _reply(sock, event="failed", error=f"{type(exc).__name__}: {exc}")
        os._exit(3)
    child[0] = pid
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    sock.close()  # only init holds the socket: EOF on the host side means the episode is gone
    _, status = os.waitpid(pid, 0)  # retried after the SIGTERM handler runs (PEP 475)
    os._exit(_worker._exit_code(status))


def _build_root(cfg: dict[str, Any]) -> None:
    """The episode's root: a size-capped tmpfs holding the overlay's upper layer and the new root."""
    _worker._check(_worker._libc.mount(None, b"/", None, _worker.MS_REC | _worker.MS_PRIVATE, None), "make / private")
    scratch = cfg["scratch"]
    # nr_inodes: empty files cost kernel memory, not tmpfs bytes; the cap keeps them inside the episode's memory.
    _worker._mount_tmpfs(scratch, f"size={cfg['disk_bytes']},nr_inodes={cfg['max_inodes']},mode=755")
    uid = cfg["uid"]
    for sub in ("upper", "work", "root", "empty"):
        os.mkdir(f"{scratch}/{sub}", 0o755)
    os.chown(f"{scratch}/upper", uid, uid)
    new = f"{scratch}/root"
    _worker._bind(new, new, readonly=False)  # pivot_root needs a mount point
    for sub in ("proc", "dev", ".old", "home", "tests", "checker", "checker/bin"):
        os.mkdir(f"{new}/{sub}", 0o755)
    checker_uid = cfg["checker_uid"]
    # The checker's files: /tests and its home are its uid's alone (the agent's uid cannot even list them);
    # /checker/work is where it may put copies the agent's code is run on (readable by the agent's uid).
    for sub, mode in (("tests", 0o700), ("checker/home", 0o700), ("checker/work", 0o755)):
        os.makedirs(f"{new}/{sub}", mode, exist_ok=True)
        os.chmod(f"{new}/{sub}", mode)
        os.chown(f"{new}/{sub}", checker_uid, checker_uid)
    os.mkdir(f"{new}/tmp", 0o1777)
    os.chmod(f"{new}/tmp", 0o1777)
    os.makedirs(f"{new}/home/agent", 0o755)
    os.chown(f"{new}/home/agent", uid, uid)
    for path in cfg["system"]:
        if os.path.islink(path):
            os.symlink(os.readlink(path), new + path)
        elif os.path.exists(path):
            _worker._bind_fd(os.open(path, os.O_PATH | os.O_CLOEXEC), new + path)
    for source, target in cfg["binds"]:  # further host folders, read-only (a Python package for checkers...)
        _worker._bind_fd(os.open(source, os.O_PATH | os.O_CLOEXEC), new + target)
    _devices(new)
    workdir = new + cfg["workdir"]
    os.makedirs(workdir, 0o755, exist_ok=True)
    lower = ":".join(cfg["layers"]) or f"{scratch}/empty"
    options = f"lowerdir={lower},upperdir={scratch}/upper,workdir={scratch}/work"
    _worker._check(
        _worker._libc.mount(
            b"overlay", workdir.encode(), b"overlay", _worker.MS_NOSUID | _worker.MS_NODEV, options.encode()
        ),
        "overlay mount of the work dir",
    )
    os.chown(workdir, uid, uid)
    _worker._switch_root(new)
    _worker._check(
        _worker._libc.mount(b"proc", b"/proc", b"proc", _worker.MS_NOSUID | _worker.MS_NODEV | _worker.MS_NOEXEC, None),
        "mount /proc",
    )
    hostname = b"sandbox"
    _worker._libc.sethostname(hostname, len(hostname))
    _loopback_up()


def _loopback_up() -> None:
    """Bring up ``lo`` of the episode's own network namespace: servers on 127.0.0.1 work, nothing else."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(probe, siocgifflags, request)[:18])[1]
        fcntl.ioctl(probe, siocsifflags, struct.pack("16sH", b"lo", flags | iff_up))


#: Landlock syscalls (the same numbers on x86_64 and aarch64) and the access rights the domain handles.
_LANDLOCK_CREATE_RULESET, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_LANDLOCK_ACCESS_FS_MAKE_BLOCK = 1 << 11
_LANDLOCK_ACCESS_FS_REFER = 1 << 13  # ABI 2 (Linux 5.19)


def _landlock_domain() -> bool:
    """Put this process in a Landlock domain: out of it, it cannot ptrace or open ``/proc/PID/mem`` of anything.

    The domain handles only ``mknod`` of block devices (which the uid cannot do anyway), so files work as
    before; what matters is Landlock's rule that a confined process may trace only its own domain's
    descendants. Every agent command gets one; the checker runs outside all of them, so nothing the agent
    left running can rewrite the checker's memory or exit code. False where the kernel has no Landlock.

    Landlock denies every rename or link into another folder (``EXDEV``) unless the ruleset handles
    "refer" and a rule grants it: without this, ``mv a/f b/`` and ``pip wheel`` failed in every episode.
    From ABI 2 on, the ruleset handles it and one rule grants it beneath ``/``, so every folder has the
    same rights and any move the uid may make is allowed. On ABI 1 (Linux 5.13 to 5.18) such moves stay
    refused: that kernel cannot allow them inside a domain.
    """
    libc = _worker._libc
    abi = libc.syscall(_LANDLOCK_CREATE_RULESET, None, 0, _LANDLOCK_CREATE_RULESET_VERSION)
    if abi < 1:
        return False
    refer = _LANDLOCK_ACCESS_FS_REFER if abi >= 2 else 0
    attr = ctypes.c_uint64(_LANDLOCK_ACCESS_FS_MAKE_BLOCK | refer)
    ruleset = libc.syscall(_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    if ruleset < 0:
        return False
    try:
        if refer:
            root = os.open("/", os.O_PATH | os.O_CLOEXEC)
            try:
                # struct landlock_path_beneath_attr is packed: u64 allowed_access, s32 parent_fd
                rule = struct.pack("=Qi", refer, root)
                # should the rule fail, the domain still confines (moves into other folders stay refused)
                libc.syscall(_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, rule, 0)
            finally:
                os.close(root)
        return bool(libc.syscall(_LANDLOCK_RESTRICT_SELF, ruleset, 0) == 0)
    finally:
        os.close(ruleset)


def _devices(new: str) -> None:
    """A read-only /dev with the harmless devices only (as the one-shot sandbox's)."""
    _worker._mount_tmpfs(new + "/dev", "mode=755,size=64k")
    for name in _worker.DEVICES:
        open(f"{new}/dev/{name}", "w").close()
        _worker._bind(f"/dev/{name}", f"{new}/dev/{name}", readonly=False)
    if os.path.exists("/dev/tty"):  # the caller's controlling terminal (a command has none: ENXIO, as in docker)
        open(f"{new}/dev/tty", "w").close()
        _worker._bind("/dev/tty", f"{new}/dev/tty", readonly=False)
    # A private devpts instance: the episode's own pseudo-terminals (tmux, script, expect), none of the host's.
    os.mkdir(f"{new}/dev/pts", 0o755)
    _worker._check(
        _worker._libc.mount(
            b"devpts",
            f"{new}/dev/pts".encode(),
            b"devpts",
            _worker.MS_NOSUID | _worker.MS_NOEXEC,
            f"newinstance,ptmxmode=0666,mode=0620,max={_MAX_PTYS}".encode(),
        ),
        "mount devpts",
    )
    os.symlink("pts/ptmx", f"{new}/dev/ptmx")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1")):
        os.symlink(target, f"{new}/dev/{name}")
    os.symlink("/proc/self/fd/2", f"{new}/dev/stderr")
    _worker._remount_readonly(new + "/dev")


def _set_oom_score(score: int) -> None:
    with open("/proc/self/oom_score_adj", "w") as fh:
        fh.write(str(score))


class _Init:
    """Pid 1's state: the host's socket, the commands running, and the checker's ``as-agent`` service."""

    def __init__(self, cfg: dict[str, Any], sock: socket.socket) -> None:
        self.cfg = cfg
        self.sock = sock
        self.running: dict[int, int] = {}  # host request id -> command pid
        self.service: socket.socket | None = None
        self.pending: set[socket.socket] = set()  # checker connections whose request has not come yet
        self.clients: dict[int, socket.socket] = {}  # pid of an as-agent run -> the checker's connection

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for request, command in list(self.running.items()):
                if command == pid:
                    del self.running[request]
                    _reply(self.sock, event="exit", id=request, code=_worker._exit_code(status))
            conn = self.clients.pop(pid, None)
            if conn is not None:
                _reply(conn, code=_worker._exit_code(status))
                conn.close()
                if not self.clients:  # what the agent's code started while the checker ran it dies with it
                    self.kill_uid(self.cfg["uid"])

    def kill_uid(self, uid: int) -> int:
        """SIGKILL every process of ``uid`` in the episode (pids of this namespace only); how many stay."""
        left = 0
        for _ in range(200):
            left = 0
            for entry in os.listdir("/proc"):
                if entry.isdigit() and entry != "1":
                    with contextlib.suppress(OSError):
                        if os.stat(f"/proc/{entry}").st_uid == uid:
                            os.kill(int(entry), signal.SIGKILL)
                            left += 1
            if not left:
                return 0
            self.reap()
            time.sleep(0.01)
        return left

    def serve_agent(self, path: str) -> None:
        """Listen at ``path`` for the checker: each connection runs one program as the agent's uid."""
        if self.service is not None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        service = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        service.bind(path)  # umask 022: nobody but root may connect until the chown below
        os.chown(path, self.cfg["checker_uid"], self.cfg["checker_uid"])
        os.chmod(path, 0o600)
        service.listen(16)
        self.service = service

    def accept(self) -> None:
        assert self.service is not None
        with contextlib.suppress(OSError):
            conn, _ = self.service.accept()
            uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
            if uid != self.cfg["checker_uid"]:
                conn.close()
                return
            self.pending.add(conn)

    def start_agent_run(self, conn: socket.socket) -> None:
        """The checker's request: ``{"argv", "cwd"}`` with its stdin, stdout and stderr attached."""
        self.pending.discard(conn)
        fds: list[int] = []
        try:
            message, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
            request = json.loads(message) if message else None
            if not isinstance(request, dict) or len(fds) != 3 or not request.get("argv"):
                raise ValueError("a request is {argv, cwd} with three descriptors")
            argv = [str(a) for a in request["argv"]]
            pid = _start(self.cfg, {"argv": argv, "cwd": request.get("cwd"), "role": "agent"}, fds)
            self.clients[pid] = conn
        except (OSError, ValueError, TypeError) as exc:
            _reply(conn, code=126, error=str(exc))
            conn.close()
        finally:
            for fd in fds:
                os.close(fd)

    def client_event(self, conn: socket.socket) -> None:
        """A connection whose run is going spoke or closed: the checker is gone, so is the run."""
        with contextlib.suppress(OSError):
            if conn.recv(16):
                return
        for pid, other in list(self.clients.items()):
            if other is conn:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)


def init(cfg: dict[str, Any], sock: socket.socket, keeper_pid: int) -> None:
    """Pid 1 of the episode: build the root, then run commands until the host hangs up."""
    _worker._die_with_parent(0)  # our parent is outside the pid namespace: it kills us by dying
    _build_root(cfg)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    state = _Init(cfg, sock)
    _reply(sock, event="ready")
    while True:
        watched: list[Any] = [sock, wake_r, *state.pending, *state.clients.values()]
        if state.service is not None:
            watched.append(state.service)
        ready = select.select(watched, [], [])[0]
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
            state.reap()
        for item in ready:
            if item is sock:
                try:
                    message, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
                except OSError:
                    os._exit(0)
                if not message:
                    os._exit(0)  # the host closed the episode: the kernel kills the rest of the namespace
                _serve(state, json.loads(message), fds)
            elif item is state.service:
                state.accept()
            elif item in state.pending:
                state.start_agent_run(item)
            elif item is not wake_r and any(item is c for c in state.clients.values()):
                state.client_event(item)


def _serve(state: _Init, request: dict[str, Any], fds: list[int]) -> None:
    """One host request; a failure is answered, never fatal (a limit ends a command, not the episode)."""
    cfg, sock = state.cfg, state.sock
    op = request.get("op")
    try:
        if op == "run" and len(fds) == 2:
            try:
                state.running[request["id"]] = _start(cfg, request, fds)
            except OSError as exc:  # fork refused (the process or memory limit): this command fails
                with contextlib.suppress(OSError):
                    os.write(fds[1], f"sandbox: could not start the command: {exc}\n".encode())
                _reply(sock, event="exit", id=request["id"], code=126)
        elif op == "kill":
            pid = state.running.get(request["id"])
            if pid is not None:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
        elif op == "kill_all":
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGKILL)  # from pid 1: every process of the namespace but init itself
        elif op == "hand_over":
            try:
                _reply(sock, event="handed", count=_hand_over(cfg, request), error=None)
            except OSError as exc:
                _reply(sock, event="handed", count=0, error=str(exc))
        elif op == "kill_agent":  # where no cgroup is available: by uid, inside the namespace
            _reply(sock, event="killed", left=state.kill_uid(cfg["uid"]))
        elif op == "serve_agent":
            try:
                state.serve_agent(request["path"])
                _reply(sock, event="serving", error=None)
            except OSError as exc:
                _reply(sock, event="serving", error=str(exc))
        elif op == "write":
            try:
                _write(cfg, request)
                _reply(sock, event="written", error=None)
            except OSError as exc:
                _reply(sock, event="written", error=str(exc))
    finally:
        for fd in fds:
            os.close(fd)


#: Top-level folders of the episode's root that are gem's, never handed to the checker.
_NOT_HANDED = frozenset({"proc", "dev", "sys", ".old", "tests", "checker"})


def _hand_over(cfg: dict[str, Any], request: dict[str, Any]) -> int:
    """Give the checker's uid what the agent's owned, and a root it may make folders in; how many entries moved.

    For checkers written for a container, where tests run as root: they write into the work dir
    (``/app/input.csv``) and make folders at the top (``/db``, ``/data``). Called once the agent's
    processes are gone. Only the episode's own writable file systems are walked (its tmpfs root and the
    work dir's overlay), without recursion (a tree as deep as the agent likes), links are never followed
    (``lchown``), and the kernel drops set-user-ID and set-group-ID bits of the files that change hands.
    ``/`` becomes sticky and world-writable, like ``/tmp``: folders can be made there, nobody's removed.
    Changing a file of the task's layers copies it up into the episode's tmpfs: the tmpfs first grows by
    the layers' bytes and inodes (``request``), so the copies never take the agent's allowance. An
    ``OSError`` here comes of the agent's files (a path past ``PATH_MAX``, a disk it filled); the caller
    scores it 0.
    """
    agent, checker = cfg["uid"], cfg["checker_uid"]
    size = cfg["disk_bytes"] + int(request.get("layer_bytes", 0))
    inodes = cfg["max_inodes"] + int(request.get("layer_inodes", 0))
    _worker._check(
        _worker._libc.mount(None, b"/", None, _worker.MS_REMOUNT, f"size={size},nr_inodes={inodes}".encode()),
        "grow the episode's tmpfs by its layers",
    )
    own = {os.stat("/").st_dev, os.stat(cfg["workdir"]).st_dev}
    moved = 0
    pending = ["/" + top for top in os.listdir("/") if top not in _NOT_HANDED]
    while pending:
        path = pending.pop()
        info = os.lstat(path)
        folder = stat.S_ISDIR(info.st_mode)
        # A folder on another file system is a read-only bind of the host's: neither changed nor walked.
        # (Only folders tell: overlayfs gives a file the device of the layer it lies in.)
        if folder and info.st_dev not in own:
            continue
        if info.st_uid == agent:
            os.lchown(path, checker, checker if info.st_gid == agent else -1)
            moved += 1
        if folder:
            pending.extend(os.path.join(path, name) for name in os.listdir(path))
    os.chmod("/", 0o1777)
    return moved


def _write(cfg: dict[str, Any], request: dict[str, Any]) -> None:
    """Write a file as root, owned by root (default), the agent's uid or the checker's."""
    path = request["path"]
    os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if request.get("append") else os.O_TRUNC)
    fd = os.open(path, flags, request.get("mode", 0o644))
    try:
        os.write(fd, base64.b64decode(request["data"]))
        os.fchmod(fd, request.get("mode", 0o644))
        owner = request.get("owner") or ("agent" if request.get("owned_by_agent") else "root")
        if owner in ("agent", "checker"):
            uid = cfg["uid"] if owner == "agent" else cfg["checker_uid"]
            os.fchown(fd, uid, uid)
    finally:
        os.close(fd)


def _start(cfg: dict[str, Any], request: dict[str, Any], fds: list[int]) -> int:
    """Fork one command: ``bash -c cmd`` (host requests) or ``argv`` (the checker's as-agent runs).

    ``fds``: stdout and stderr, or stdin, stdout and stderr. Roles: ``agent`` (the episode's uid, its
    cgroup, a Landlock domain of its own) or ``checker`` (the checker's uid and cgroup, no domain).
    """
    role = "checker" if request.get("checker") else request.get("role", "agent")
    pid = os.fork()
    if pid != 0:
        return pid
    try:
        os.setsid()
        stdio = fds if len(fds) == 3 else [os.open(os.devnull, os.O_RDONLY), *fds]
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        for fd in cfg["checker_fds"] if role == "checker" else cfg["agent_fds"]:
            os.write(fd, b"0")  # join the role's cgroups (the agent's are what is killed before the checker)
        os.closerange(3, 65_536)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)  # a shell expects the defaults (`yes | head` ends by SIGPIPE)
        signal.set_wakeup_fd(-1)
        # The episode's memory limit ends a command, never the episode: the OOM killer takes any command's
        # process (score +1000; raising needs no privilege, unlike protecting init with -1000) before init.
        _set_oom_score(1000)
        _worker._set_limits(cfg["limits"])
        uid = cfg["checker_uid"] if role == "checker" else cfg["uid"]
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        _worker._fresh_keyrings(True)
        _worker._check(_worker._libc.prctl(_worker.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
        if role != "checker":
            _landlock_domain()
        _worker._install_seccomp()
        try:
            os.chdir(request.get("cwd") or cfg["workdir"])
        except OSError:
            if "argv" in request:
                raise
            os.chdir(cfg["workdir"])
        if "argv" in request:  # the agent's environment, not the checker's
            os.execvpe(request["argv"][0], request["argv"], cfg["env"])
        env = {**cfg["env"], **request.get("env", {})}
        os.execve("/bin/bash", ["bash", "-c", request["cmd"]], env)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.write(2, f"sandbox: could not start the command: {type(exc).__name__}: {exc}\n".encode())
    os._exit(127)


if __name__ == "__main__":
    zygote(int(sys.argv[1]))
