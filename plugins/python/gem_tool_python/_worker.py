"""Sandbox fork server and worker: confine, wait for one program on stdin, run it, report, exit.

Started once per pool as ``python -I -B _worker.py zygote '<json>'`` by
:mod:`gem_tool_python.sandbox`. Stdlib only and no gem imports. The *zygote* imports
what programs need once, then forks one worker per request, so a new worker costs a
``fork`` instead of an interpreter start-up. Process tree of one worker::

    zygote (root)                  receives pipes over a unix socket; [namespaces: a new pid
      │                            namespace for the next child only], forks
      └─ monitor                   pid 1 of the new pid namespace: unshare(mount, net, ipc, uts),
           │                       private mounts, tmpfs /tmp, fresh /proc; fork, reap, report
           │                       the runner's exit
           └─ runner               new session, rlimits, fresh uid, no_new_privs: runs the code

When the runner exits the monitor exits; the kernel then kills every other process in the
pid namespace before the monitor can be reaped, so nothing the code started outlives the call.
Without namespaces the monitor kills the runner's session and (as root) every process of the
call's uid instead.

File descriptors of a worker: 0 code in, 1 and 2 program output, 3 control messages, one
JSON object per line: ``{"event": "monitor", "pid": N}`` (host pid of the monitor, from the zygote),
``{"event": "ready"}``, ``{"event": "done", "status": "ok"|"error"|"exit", "error": str}``
(runner) and ``{"event": "exit", "code": N}`` (monitor; ``128 + signal`` when killed).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import glob
import json
import linecache
import os
import platform
import re
import resource
import signal
import socket
import sys
import traceback
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
CTRL = 3
#: At most this many cgroup.procs files come with a fork request (v1: memory and pids).
MAX_CGROUP_FDS = 2
MS_RDONLY, MS_REMOUNT, MNT_DETACH = 1, 32, 2
#: Where the new root is assembled before ``pivot_root`` (covered by a tmpfs in the call's own mount namespace).
STAGING = "/tmp"
WORKDIR_IN_NS = "/tmp/work"
#: The host's programs and shared libraries (read-only): Python extensions and ``subprocess`` need them.
SYSTEM_PATHS = ("/bin", "/usr/bin", "/lib", "/lib32", "/lib64", "/libx32", "/usr/lib", "/usr/lib32", "/usr/lib64")
SYSTEM_PATHS += ("/etc/ld.so.cache",)
DEVICES = ("null", "zero", "full", "random", "urandom")
#: Syscall numbers by machine: pivot_root (no libc wrapper) and the seccomp filter's.
_SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "pivot_root": 155, "clone": 56, "clone3": 435, "unshare": 272, "setns": 308, "mount": 165,
        "umount2": 166, "chroot": 161, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
        "perf_event_open": 298, "userfaultfd": 323, "kexec_load": 246, "kexec_file_load": 320,
        "init_module": 175, "finit_module": 313, "delete_module": 176, "open_by_handle_at": 304,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "swapon": 167, "swapoff": 168, "reboot": 169, "acct": 163,
    },
    "aarch64": {
        "pivot_root": 41, "clone": 220, "clone3": 435, "unshare": 97, "setns": 268, "mount": 40,
        "umount2": 39, "chroot": 51, "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280,
        "perf_event_open": 241, "userfaultfd": 282, "kexec_load": 104, "kexec_file_load": 294,
        "init_module": 105, "finit_module": 273, "delete_module": 106, "open_by_handle_at": 265,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "swapon": 224, "swapoff": 225, "reboot": 142, "acct": 89,
    },
}  # fmt: skip
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
#: Namespaces, mounts, keyrings, kernel-attack surface (bpf, io_uring, userfaultfd...): nothing a program needs.
_DENIED = tuple(name for name in _SYSCALLS["x86_64"] if name not in ("pivot_root", "clone", "clone3"))
#: clone() flags that create namespaces (CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET).
_CLONE_NEW_ANY = 0x7E020000
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_CLEAR = 1, 7
KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = -4, -5

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
#: The fork server's environment when it starts forking (the host starts it with the programs' environment).
_environ: dict[str, str] = {}
#: Compiled once by the fork server, so that a call's first ``compile`` finds the compiler's lazily
#: built state (the AST types, about 1 ms) ready instead of building it in every worker.
_WARM_UP = """
import os
def f(a, *b, c=1, **d):
    global g
    return [x for x in b if x], {k: v for k, v in d.items()}, lambda y: y, f"{a!r:>3}"
class C(object):
    async def m(self):
        async with self as s:
            await s
try:
    with open(os.devnull) as fh:
        del fh
except (OSError, ValueError) as exc:
    raise RuntimeError from exc
finally:
    pass
"""


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _send(**message: Any) -> None:
    os.write(CTRL, (json.dumps(message) + "\n").encode())


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies; exit now if the parent is already gone."""
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    if parent and os.getppid() != parent:
        os._exit(1)


def _exit_code(status: int) -> int:
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


# --------------------------------------------------------------------------- zygote
def zygote(cfg: dict[str, Any]) -> None:
    """Serve fork requests until the host closes the socket."""
    sock = socket.socket(fileno=cfg["socket_fd"])
    for module in cfg["preimport"]:
        __import__(module)
    confined = ""
    # Kept open to return to after each worker's pid namespace (see _start_monitor); opened
    # before confining, as the confined root has no /proc.
    pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC) if os.path.exists("/proc/self/ns/pid") else None
    if cfg["confine"]:
        # Build the allow-listed root once, here; each call's mount namespace is a cheap copy of it.
        try:
            cfg["under_tmp"] = confine_root(_layout_in_child(cfg["packages"], cfg["expose"], cfg["preimport"]))
            confined = "confined"
        except OSError as exc:
            confined = f"not confined: {exc}"
    _warm_up(confined == "confined")
    # Every fork copies the fork server's page tables, and every page either side then writes
    # is copied: keep the garbage collector off the objects that exist now (all of them stay).
    gc.freeze()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors are reaped by the kernel
    sock.send(json.dumps({"ready": True, "confined": confined}).encode())
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 1 << 20, 4 + MAX_CGROUP_FDS)
        except OSError:
            os._exit(0)
        if not message:  # the host closed the socket (or died): idle workers die with us
            os._exit(0)
        if not 4 <= len(fds) <= 4 + MAX_CGROUP_FDS:
            for fd in fds:
                os.close(fd)
            continue
        try:
            _start_monitor({**cfg, **json.loads(message)}, fds, sock, pid_ns)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            with contextlib.suppress(OSError):
                os.write(fds[CTRL], (json.dumps({"event": "failed", "error": str(exc)}) + "\n").encode())
        finally:
            for fd in fds:
                os.close(fd)


def _start_monitor(cfg: dict[str, Any], fds: list[int], sock: socket.socket, pid_ns: int | None) -> None:
    """Fork the call's monitor (with namespaces: pid 1 of a new pid namespace) and report its pid.

    ``unshare(CLONE_NEWPID)`` puts only the next child in the new pid namespace, so the fork
    server asks for it, forks, and returns its own children's to its pid namespace at once:
    the monitor is its direct child, one fork per worker and no process in between.
    """
    parent = os.getpid()
    if cfg["namespaces"]:
        if pid_ns is None:
            raise OSError("the fork server cannot return to its own pid namespace")
        _check(_libc.unshare(CLONE_NEWPID), "unshare(pid namespace)")
    try:
        pid = os.fork()
    finally:
        if cfg["namespaces"] and os.getpid() == parent:
            # Until this, a second unshare(CLONE_NEWPID) fails: a fork server that cannot is useless.
            try:
                _check(_libc.setns(pid_ns, CLONE_NEWPID), "setns(own pid namespace)")
            except OSError:
                os._exit(1)
    if pid == 0:
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            sock.close()
            # 0-3: code in, stdout, stderr, control; then the call's cgroup.procs files, if any.
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            os.closerange(len(fds), 65_536)
            monitor(cfg, parent)
        except BaseException as exc:
            with contextlib.suppress(BaseException):
                _send(event="failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            os._exit(3)
    os.write(fds[CTRL], (json.dumps({"event": "monitor", "pid": pid}) + "\n").encode())


# --------------------------------------------------------------------------- monitor
def monitor(cfg: dict[str, Any], parent: int) -> None:
    """Set up the filesystem, start the runner, report its exit, and kill what it left."""
    # In a new pid namespace our parent is outside it (getppid() == 0): skip that check.
    _die_with_parent(0 if cfg["namespaces"] else parent)
    if cfg["namespaces"]:
        # The pid namespace came with the fork; the others now, before the call's cgroups are joined.
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    for fd in range(4, 4 + cfg.get("cgroups", 0)):
        os.write(fd, b"0")  # "0": this process; everything it starts from now on is charged there too
        os.close(fd)
    if cfg["namespaces"]:
        _private_mounts(cfg)
    started: list[int] = []

    def stop(*_: Any) -> None:
        if started:
            _kill_leftovers(cfg, started[0])
        os._exit(137)

    # The host's "kill everything" in fallback mode; installed before the runner exists so
    # that an early signal cannot hit the default action (which would leave the runner alive).
    signal.signal(signal.SIGUSR1, stop)
    runner_pid = os.fork()
    if runner_pid == 0:
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        try:
            runner(cfg)
        except BaseException as exc:
            _send(event="failed", error=f"{type(exc).__name__}: {exc}")
        os._exit(3)
    started.append(runner_pid)
    if not cfg["namespaces"]:
        _send(event="runner", pid=runner_pid)
    for fd in (0, 1, 2):
        os.close(fd)
    while True:  # as pid 1 we adopt orphans: reap them until the runner itself exits
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(0)
        if pid == runner_pid:
            code = _exit_code(status)
            _kill_leftovers(cfg, runner_pid)
            _send(event="exit", code=code)
            os._exit(code)


def _kill_leftovers(cfg: dict[str, Any], runner_pid: int) -> None:
    """Fallback mode: kill the runner's session and, as root, every process of the call's uid."""
    if cfg["namespaces"]:
        return  # the kernel kills the whole pid namespace when we exit
    with contextlib.suppress(OSError):
        os.killpg(runner_pid, signal.SIGKILL)
    uid = cfg["uid"]
    if uid is not None and os.fork() == 0:
        # kill(-1) as the call's uid reaches every process of that uid, including ones that left
        # the session; the kernel walks the task list under a lock, so a fork cannot outrun it.
        os.setresuid(uid, uid, uid)
        os.kill(-1, signal.SIGKILL)
        os._exit(0)
    try:
        while True:
            os.wait()
    except ChildProcessError:
        pass


def confine_root(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """Enter a private mount namespace whose root holds only the allow-listed paths (see :func:`layout`).

    Returns:
        The steps (path, ``"bind"`` or ``"hide"``) under ``/tmp``: each call covers ``/tmp`` with its own
        tmpfs and replays them.
    """
    _check(_libc.unshare(CLONE_NEWNS), "unshare(mount namespace)")
    _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    # Open every source before anything is covered: a venv may live under the /tmp we cover next.
    sources = [(path, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path in plan["bind"] if os.path.exists(path)]
    new = STAGING
    _mount_tmpfs(new, "mode=755,size=4m")
    for sub in ("proc", "dev", "tmp", ".old"):
        os.mkdir(new + "/" + sub, 0o755)
    _mount_tmpfs(new + "/dev", "mode=755,size=64k")
    for name in DEVICES:
        open(f"{new}/dev/{name}", "w").close()
        _bind(f"/dev/{name}", f"{new}/dev/{name}", readonly=False)
    os.mkdir(new + "/dev/shm", 0o1777)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1")):
        os.symlink(target, f"{new}/dev/{name}")
    os.symlink("/proc/self/fd/2", f"{new}/dev/stderr")
    _remount_readonly(new + "/dev")
    # Shallow paths first: a site-packages directory is covered with an empty tmpfs only after the
    # tree holding it is bound, and allowed packages are bound into that tmpfs after it.
    steps = [(path, "bind", fd) for path, fd in sources] + [(path, "hide", -1) for path in plan["hide"]]
    steps.sort(key=lambda step: (step[0].count("/"), step[0]))
    _apply(new, steps)
    for link, points_to in plan["links"]:
        os.makedirs(os.path.dirname(new + link), 0o755, exist_ok=True)
        if not os.path.lexists(new + link):
            os.symlink(points_to, new + link)
    _switch_root(new)
    _remount_readonly("/")
    return [(path, kind) for path, kind, _ in steps if path.startswith("/tmp/")]


def _apply(root: str, steps: list[tuple[str, str, int]]) -> None:
    """Bind (``fd`` open with ``O_PATH``) or hide (empty read-only tmpfs) each path under ``root``, in order."""
    hidden: list[str] = []
    for path, kind, fd in steps:
        target = root + path
        if kind == "hide":
            if os.path.isdir(target):
                _mount_tmpfs(target, "mode=755,size=64k")
                hidden.append(target)
            continue
        _bind_fd(fd, target)
    for target in hidden:
        _remount_readonly(target)


def _bind_fd(fd: int, target: str) -> None:
    """Bind the path open as ``fd`` (``O_PATH``) read-only at ``target``, creating the mount point."""
    is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
    with contextlib.suppress(OSError):  # already there when a bound tree holds it
        if is_dir:
            os.makedirs(target, 0o755, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
            open(target, "a").close()
    _bind(f"/proc/self/fd/{fd}", target, readonly=True)
    os.close(fd)


def _private_mounts(cfg: dict[str, Any]) -> None:
    """Per call, in the copy of the zygote's confined root: fresh /proc, /tmp and /dev/shm."""
    _check(_libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount /proc")
    replay = [
        (path, kind, os.open(path, os.O_PATH | os.O_CLOEXEC) if kind == "bind" else -1)
        for path, kind in cfg.get("under_tmp", [])
    ]
    opts = f"size={cfg['tmpfs_bytes']},mode=1777"
    _mount_tmpfs("/tmp", opts)
    _mount_tmpfs("/dev/shm", opts)
    _apply("", replay)
    hostname = b"sandbox"
    _libc.sethostname(hostname, len(hostname))
    os.mkdir(WORKDIR_IN_NS, 0o700)
    if cfg["uid"] is not None:
        os.chown(WORKDIR_IN_NS, cfg["uid"], cfg["uid"])
    cfg["workdir"] = WORKDIR_IN_NS


def _mount_tmpfs(path: str, options: str) -> None:
    _check(_libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()), f"tmpfs {path}")


def _bind(source: str, target: str, *, readonly: bool) -> None:
    _check(_libc.mount(source.encode(), target.encode(), None, MS_BIND, None), f"bind {target}")
    if readonly:
        _remount_readonly(target)


def _remount_readonly(target: str) -> None:
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
    _check(_libc.mount(None, target.encode(), None, flags, None), f"read-only {target}")


def _switch_root(new: str) -> None:
    """Make ``new`` the root and detach the old one, so nothing of the host tree stays reachable."""
    number = _SYSCALLS.get(platform.machine(), {}).get("pivot_root")
    if number is None:
        raise OSError(f"pivot_root: unknown syscall number on {platform.machine()}")
    _check(_libc.syscall(number, new.encode(), f"{new}/.old".encode()), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.old", MNT_DETACH), "detach the old root")
    os.rmdir("/.old")


def _layout_in_child(packages: list[str], expose: list[str], preimport: list[str]) -> dict[str, Any]:
    """:func:`layout`, computed in a child process.

    Its imports (``importlib.metadata`` and what that pulls in) would otherwise grow the fork
    server, and with it the cost of every fork.
    """
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            answer: dict[str, Any] = {"plan": layout(packages, expose, preimport)}
        except OSError as exc:  # the root cannot be built: said as "not confined", as before
            answer = {"error": str(exc)}
        except BaseException as exc:  # a bug: the fork server fails to start, as before
            answer = {"crash": f"{type(exc).__name__}: {exc}"}
        with open(write, "wb") as pipe:
            pipe.write(json.dumps(answer).encode())
        os._exit(0)
    os.close(write)
    with open(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    try:
        answer = json.loads(data)
    except ValueError:
        raise OSError("computing the sandbox's layout failed") from None
    if "crash" in answer:
        raise RuntimeError(f"computing the sandbox's layout failed: {answer['crash']}")
    if "error" in answer:
        raise OSError(answer["error"])
    return dict(answer["plan"])


def layout(packages: list[str], expose: list[str], preimport: list[str]) -> dict[str, Any]:
    """What the sandbox's root holds: ``bind`` (read-only), ``hide`` (empty dirs), ``links``.

    The interpreter and its standard library, the system's programs and shared libraries, the
    top-level entries (packages, ``.libs`` folders, ``.dist-info``) of the allowed distributions
    and their dependencies, and ``expose``. Every site-packages directory inside those trees is
    covered, so nothing installed beside them (the envs' datasets, say) is visible.
    """
    import importlib.metadata
    import sysconfig

    bind: set[str] = set()
    links: list[tuple[str, str]] = []
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            links.append((path, os.readlink(path)))
            path = os.path.realpath(path)
        if os.path.exists(path):
            bind.add(path)
    interpreter = os.path.realpath(sys.executable)
    bind.update({os.path.dirname(interpreter), os.path.dirname(sys.executable)})
    # Not sysconfig's "platstdlib": in a venv that is the venv's lib/pythonX.Y, which holds site-packages.
    stdlib = {os.path.realpath(os.path.dirname(os.__file__))}
    dynload = {os.path.realpath(p) for p in sys.path if p.endswith("lib-dynload")}
    bind.update(stdlib | dynload)
    libdir, libpython = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY")
    if libdir and libpython and ".so" in libpython and os.path.isfile(os.path.join(libdir, libpython)):
        bind.add(os.path.realpath(os.path.join(libdir, libpython)))
    venv_cfg = os.path.join(sys.prefix, "pyvenv.cfg")
    if os.path.isfile(venv_cfg):
        bind.add(venv_cfg)
    hide = {os.path.realpath(p) for p in sys.path if os.path.isdir(p)} - stdlib - dynload
    for tree in list(bind):
        for pattern in ("site-packages", "dist-packages", "python3*/site-packages", "python3*/dist-packages"):
            hide.update(os.path.realpath(p) for p in glob.glob(os.path.join(tree, pattern)))
    hide -= bind
    for entry in _distribution_entries(packages, preimport, importlib.metadata):
        bind.add(entry)
    bind.update(os.path.realpath(p) for p in expose if os.path.exists(p))
    return {"bind": sorted(bind), "hide": sorted(hide), "links": links}


def _distribution_entries(packages: list[str], preimport: list[str], metadata: Any) -> set[str]:
    """Top-level files and folders of the named distributions and everything they require."""
    wanted = [name.lower().replace("_", "-") for name in packages]
    owners = metadata.packages_distributions() if preimport else {}
    for module in preimport:  # a pre-imported module's package must stay readable for lazy imports
        wanted += [d.lower() for d in owners.get(module.split(".")[0], [])]
    seen: set[str] = set()
    entries: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for file in dist.files or []:
            top = file.parts[0]
            if top not in ("..", "__pycache__") and not top.endswith(".pth"):
                entries.add(os.path.realpath(str(dist.locate_file(top))))
        for requirement in dist.requires or []:
            if "extra ==" in requirement:
                continue
            wanted.append(re.split(r"[\s;<>=!~\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-"))
    return entries


# --------------------------------------------------------------------------- runner
def _count_own_processes(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                count += os.stat(f"/proc/{entry}").st_uid == uid
    return count


def _set_limits(cfg: dict[str, Any]) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = int(usage.ru_utime + usage.ru_stime) + int(cfg["cpu_s"])
    # The soft limit sends SIGXCPU; the hard limit one second later is a SIGKILL nobody can catch.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (cfg["memory_bytes"], cfg["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["fsize_bytes"], cfg["fsize_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (cfg["nofile"], cfg["nofile"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    nproc = cfg["nproc"]
    if cfg["uid"] is None:
        # RLIMIT_NPROC counts every process of the real uid, which we share with the host user.
        nproc += _count_own_processes(os.getuid())
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The classic-BPF filter: refuse (EPERM) the ``_DENIED`` syscalls and namespace-creating clones.

    ``clone3`` gets ENOSYS, which makes libc fall back to ``clone``, whose flags (unlike
    clone3's, passed in memory) the filter can read. Other ABIs (x32, i386 via int 0x80) are refused.
    """
    ld_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, deny, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    numbers = _SYSCALLS[machine]
    checks = [numbers[name] for name in _DENIED]
    # Indices: 0-2 arch check, 3 load nr, 4 x32 check, then one JEQ per denied syscall, then the clone part.
    body: list[tuple[int, int, int, int]] = [(ld_abs, 0, 0, 4), (jeq, 1, 0, _AUDIT_ARCH[machine]), (ret, 0, 0, deny)]
    body.append((ld_abs, 0, 0, 0))
    tail_start = 5 + len(checks)
    # Tail: [clone3 -> enosys][clone? else allow][load flags][jset -> deny][allow][deny][enosys]
    allow_at, deny_at, enosys_at = tail_start + 4, tail_start + 5, tail_start + 6
    body.append((jge, deny_at - 5, 0, 0x40000000))
    for index, number in enumerate(checks):
        here = 5 + index
        body.append((jeq, deny_at - here - 1, 0, number))
    body.append((jeq, enosys_at - tail_start - 1, 0, numbers["clone3"]))
    body.append((jeq, 0, allow_at - tail_start - 2, numbers["clone"]))
    body.append((ld_abs, 0, 0, 16))  # args[0], low 32 bits (little endian): the clone flags
    body.append((jset, deny_at - tail_start - 4, 0, _CLONE_NEW_ANY))
    body += [(ret, 0, 0, allow), (ret, 0, 0, deny), (ret, 0, 0, enosys)]
    return body


#: The filter as the kernel takes it and the array it points to, built once (workers inherit them).
_seccomp: dict[str, Any] = {}


def _seccomp_filter() -> Any:
    """This machine's ``sock_fprog``, or ``None`` where there is no filter."""
    if "fprog" not in _seccomp:
        machine = platform.machine()
        _seccomp["fprog"] = None
        if machine in _AUDIT_ARCH:
            program = seccomp_program(machine)
            _seccomp["array"] = (_SockFilter * len(program))(*[_SockFilter(*step) for step in program])
            _seccomp["fprog"] = _SockFprog(len(program), _seccomp["array"])
    return _seccomp["fprog"]


def _warm_up(namespaces: bool) -> None:
    """What every worker would otherwise do first, done once before forking (workers inherit the result)."""
    _seccomp_filter()
    _environ.update(os.environ)
    if namespaces:  # every call's HOME and TMPDIR (the first setenv in a fresh worker costs 40 page copies)
        os.environ.update(HOME=WORKDIR_IN_NS, TMPDIR=WORKDIR_IN_NS)
    compile(_WARM_UP, "<warm-up>", "exec")
    open(os.devnull).close()  # the runner's stdin is such a file


def _install_seccomp() -> None:
    fprog = _seccomp_filter()
    if fprog is None:
        return  # stated in docs/tools.md: no syscall filter on other machines
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")


def _fresh_keyrings(own_uid: bool) -> None:
    """A new, empty session keyring (not the host's); with a call's own uid, its user keyrings emptied."""
    keyctl = _SYSCALLS.get(platform.machine(), {}).get("keyctl")
    if keyctl is None:
        return
    if _libc.syscall(keyctl, KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        raise OSError(ctypes.get_errno(), "keyctl(JOIN_SESSION_KEYRING)")
    for ring in (KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING) if own_uid else ():
        _libc.syscall(keyctl, KEYCTL_CLEAR, ring)


def runner(cfg: dict[str, Any]) -> None:
    """Drop privileges, wait for code on stdin, run it, report on the control pipe."""
    parent = os.getppid()
    os.setsid()
    _set_limits(cfg)
    uid = cfg["uid"]
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    _fresh_keyrings(uid is not None)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    _install_seccomp()
    # Changing credentials cleared the parent-death signal: set it again.
    _die_with_parent(parent)
    os.chdir(cfg["workdir"])
    stdlib = os.path.dirname(os.__file__)
    if not os.access(stdlib, os.R_OK | os.X_OK):  # fail now, not mid-call, if the stdlib is unreadable
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), stdlib)
    if cfg["env"] != _environ:  # normally equal: then the program's environment is already in place
        os.environ.clear()
        os.environ.update(cfg["env"])
    for name in ("HOME", "TMPDIR"):
        if os.environ.get(name) != cfg["workdir"]:
            os.environ[name] = cfg["workdir"]
    # A full output file should fail the write (EFBIG), not kill the program.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _send(event="ready")
    code = sys.stdin.buffer.read().decode("utf-8", "replace")
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the program may read stdin; give it nothing
    status, error = _run(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # the program may have closed or broken its streams
        pass
    try:
        _send(event="done", status=status, error=error)
    except OSError:
        os._exit(70)
    os._exit(0)


def _run(code: str) -> tuple[str, str | None]:
    filename = "<code>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    me = os.getpid()
    try:
        exec(compile(code, filename, "exec"), namespace)
        status, error = "ok", None
    except SystemExit as exc:
        status = "ok" if exc.code in (None, 0) else "exit"
        error = None if status == "ok" else f"SystemExit: {exc.code}"
    except BaseException as exc:
        # Skip this frame: the model should see only its own code in the traceback.
        status = "error"
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        error = "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()
    if os.getpid() != me:  # a child forked by the program finished it: stay silent
        os._exit(0)
    return status, error


if __name__ == "__main__":
    zygote(json.loads(sys.argv[1]))
