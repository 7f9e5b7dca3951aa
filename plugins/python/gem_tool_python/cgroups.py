"""Per-call cgroups: one memory limit and one process limit for everything a call starts.

RLIMIT_AS bounds each process separately and does not see shared memory (``memfd``,
``/dev/shm``, tmpfs files); a cgroup charges all of it, for every process of the call, to one
limit. cgroup v2 is used where the host delegates the ``memory`` and ``pids`` controllers to
us; otherwise the v1 ``memory`` and ``pids`` hierarchies if they are mounted and writable;
otherwise :func:`detect` says why not and the sandbox runs on rlimits alone (docs/tools.md).

The host creates a call's cgroups and passes their ``cgroup.procs`` files, open, to the
worker, whose monitor process joins them (writing ``0``) before it starts the program.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CallCgroups", "detect"]

_ROOT = Path("/sys/fs/cgroup")
_counter = itertools.count()
_counter_lock = threading.Lock()


@dataclass
class CallCgroups:
    """Where a pool's per-call cgroups live, and their limits.

    Attributes:
        version: ``2`` (unified) or ``1`` (separate memory and pids hierarchies).
        parents: Folder under which each call gets its own cgroup, per hierarchy.
        memory_bytes: The call's memory limit (memory + swap 0, shared memory included).
        max_pids: The call's process and thread limit.
    """

    version: int
    parents: dict[str, Path]
    memory_bytes: int
    max_pids: int
    live: set[str] = field(default_factory=set)

    def create(self) -> tuple[str, list[int]]:
        """Make one call's cgroups; returns their name and open ``cgroup.procs`` descriptors (caller closes)."""
        with _counter_lock:
            name = f"call-{os.getpid()}-{next(_counter)}"
        fds: list[int] = []
        try:
            # Plain os calls on strings, not pathlib: this runs for every call (pathlib cost more than the kernel).
            for kind, parent in self.parents.items():
                folder = os.path.join(parent, name)
                os.mkdir(folder, 0o700)
                self.live.add(name)
                for setting, value in self._settings(kind):
                    with contextlib.suppress(FileNotFoundError):  # a setting this kernel lacks
                        _write(os.path.join(folder, setting), value)
                fds.append(os.open(os.path.join(folder, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            for fd in fds:
                os.close(fd)
            self.remove(name)
            raise
        return name, fds

    def _settings(self, kind: str) -> list[tuple[str, str]]:
        memory, pids = str(self.memory_bytes), str(self.max_pids)
        if self.version == 2:
            return [("memory.max", memory), ("memory.swap.max", "0"), ("memory.oom.group", "1"), ("pids.max", pids)]
        if kind == "memory":  # memsw (memory + swap) must be set after the plain limit
            return [("memory.limit_in_bytes", memory), ("memory.memsw.limit_in_bytes", memory)]
        return [("pids.max", pids)]

    def oom_kills(self, name: str) -> int | None:
        """How many processes of call ``name`` the kernel killed for its memory limit; ``None`` if it cannot tell.

        cgroup v1 has no group kill: its OOM killer takes one process at a time (the
        largest), so the rest of a call whose memory is spread over processes would live on
        (a parent waiting for its killed children until the wall clock). The host polls
        this counter (``oom_kill`` in ``memory.events`` for v2, ``memory.oom_control`` for
        v1, Linux 4.13+) and kills the whole call at the first kill.
        """
        memory = self.parents.get("unified" if self.version == 2 else "memory")
        if memory is None:
            return None
        events = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            fd = os.open(os.path.join(memory, name, events), os.O_RDONLY | os.O_CLOEXEC)
            try:
                text = os.read(fd, 4096).decode("ascii", "replace")
            finally:
                os.close(fd)
        except OSError:
            return None
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return None

    def create_parts(self, parts: tuple[str, ...], part_pids: int) -> tuple[str, dict[str, list[int]]]:
        """One episode's cgroup (the limits above) with a child cgroup per part (``init``, ``agent``...).

        Each part but ``init`` gets its own process limit ``part_pids``; memory is the episode's, shared.
        Returns the name and, per part, its open ``cgroup.procs`` descriptors (caller closes). Processes
        live in the parts only (cgroup v2 allows no process in a cgroup whose children have controllers).
        """
        name, fds = self.create()
        for fd in fds:
            os.close(fd)
        found: dict[str, list[int]] = {part: [] for part in parts}
        try:
            for kind, parent in self.parents.items():
                folder = os.path.join(parent, name)
                if self.version == 2:
                    _write(os.path.join(folder, "cgroup.subtree_control"), "+memory +pids")
                for part in parts:
                    os.mkdir(os.path.join(folder, part), 0o700)
                    if part != "init" and kind in ("pids", "unified"):
                        _write(os.path.join(folder, part, "pids.max"), str(part_pids))
                    procs = os.path.join(folder, part, "cgroup.procs")
                    found[part].append(os.open(procs, os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            for fd in (fd for part_fds in found.values() for fd in part_fds):
                os.close(fd)
            self.remove(name)
            raise
        return name, found

    def pid_limit_hits(self, name: str, part: str = "") -> int | None:
        """How often ``name`` (or its ``part``) refused a fork at its process limit, if known."""
        parent = self.parents.get("pids") or self.parents.get("unified")
        if parent is None:
            return None
        try:
            text = Path(parent, name, part, "pids.events").read_text()
        except OSError:
            return None
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "max" and value.strip().isdigit():
                return int(value)
        return None

    def members(self, name: str, part: str) -> set[int]:
        """Host pids in ``name``'s ``part`` (any hierarchy)."""
        pids: set[int] = set()
        for parent in self.parents.values():
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in Path(parent, name, part, "cgroup.procs").read_text().split())
        return pids

    def kill(self, name: str, part: str, timeout_s: float = 5.0) -> set[int]:
        """SIGKILL every process of ``name``'s ``part`` through the cgroup; returns those still there (none).

        cgroup v2: ``cgroup.kill``. v1: the part's ``pids.max`` drops to 0 first, so nothing in it can
        fork while its members are killed; each member is signalled through a pidfd after checking
        that it is still in the part (a pid the kernel reused for another process is never touched).
        Processes cannot leave their cgroup (no cgroup file system in the sandbox), so ``setsid``,
        ``nohup``, double forks and background loops are all members.
        """
        pids_parent = self.parents.get("pids") or self.parents.get("unified")
        limit = os.path.join(pids_parent, name, part, "pids.max") if pids_parent is not None else None
        before = None
        if limit is not None:
            with contextlib.suppress(OSError):
                before = Path(limit).read_text().strip()
                _write(limit, "0")
        if self.version == 2:
            with contextlib.suppress(OSError):
                _write(os.path.join(self.parents["unified"], name, part, "cgroup.kill"), "1")
        deadline = time.monotonic() + timeout_s
        marker = f"/{name}/{part}"
        while True:
            left = self.members(name, part)
            # pids.current also counts a fork still in flight (charged, not yet listed) and zombies not yet
            # reaped: zero means every process of the part is gone for good.
            if (not left and self._pids_current(name, part) in (0, None)) or time.monotonic() > deadline:
                break
            for pid in left:
                with contextlib.suppress(OSError):
                    pidfd = os.pidfd_open(pid)
                    try:
                        if any(line.endswith(marker) for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()):
                            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                    finally:
                        os.close(pidfd)
            time.sleep(0.005)
        if limit is not None and before is not None:
            with contextlib.suppress(OSError):
                _write(limit, before)
        return left

    def _pids_current(self, name: str, part: str) -> int | None:
        parent = self.parents.get("pids") or self.parents.get("unified")
        if parent is None:
            return None
        try:
            return int(Path(parent, name, part, "pids.current").read_text())
        except (OSError, ValueError):
            return None

    def remove(self, name: str) -> None:
        """Remove a call's cgroups once its processes are gone (retries briefly while the kernel catches up)."""
        for parent in self.parents.values():
            folder = os.path.join(parent, name)
            with contextlib.suppress(OSError):
                for part in os.scandir(folder):
                    if part.is_dir(follow_symlinks=False):
                        self._remove_folder(part.path)
            self._remove_folder(folder)
        self.live.discard(name)

    @staticmethod
    def _remove_folder(folder: str) -> None:
        for _ in range(100):
            try:
                os.rmdir(folder)
                return
            except FileNotFoundError:
                return
            except OSError:
                with contextlib.suppress(OSError):
                    _write(os.path.join(folder, "cgroup.kill"), "1")  # v2: anything left dies now
                time.sleep(0.01)


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _own_cgroup(controller: str) -> str | None:
    """This process's cgroup path in the v1 hierarchy of ``controller`` (``""`` for v2)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None


def _try_v2(memory_bytes: int, max_pids: int) -> CallCgroups:
    if not (_ROOT / "cgroup.controllers").exists():
        raise OSError("cgroup v2 is not mounted at /sys/fs/cgroup")
    parent = _ROOT / "gem-sandbox"
    needed = {"memory", "pids"}
    if not needed <= set((_ROOT / "cgroup.subtree_control").read_text().split()):
        # Allowed only where /sys/fs/cgroup holds no processes itself (the real root, or a delegated one).
        (_ROOT / "cgroup.subtree_control").write_text("+memory +pids")
    parent.mkdir(mode=0o755, exist_ok=True)
    if not needed <= set((parent / "cgroup.subtree_control").read_text().split()):
        (parent / "cgroup.subtree_control").write_text("+memory +pids")
    return CallCgroups(2, {"unified": parent}, memory_bytes, max_pids)


def _try_v1(memory_bytes: int, max_pids: int) -> CallCgroups:
    parents: dict[str, Path] = {}
    for controller in ("memory", "pids"):
        own = _own_cgroup(controller)
        mount = _ROOT / controller
        if own is None or not (mount / "cgroup.procs").exists():
            raise OSError(f"the cgroup v1 {controller} controller is not mounted at {mount}")
        parent = mount / own.lstrip("/") / "gem-sandbox"
        parent.mkdir(mode=0o755, exist_ok=True)
        parents[controller] = parent
    return CallCgroups(1, parents, memory_bytes, max_pids)


def detect(memory_bytes: int, max_pids: int) -> tuple[CallCgroups | None, str]:
    """Per-call cgroups for this host, or ``None`` and why they are unavailable.

    Every step is tried for real (creating a test cgroup), so a read-only or undelegated
    hierarchy is found here rather than on the first call.
    """
    reasons = []
    for attempt in (_try_v2, _try_v1):
        try:
            groups = attempt(memory_bytes, max_pids)
            name, fds = groups.create()
            for fd in fds:
                os.close(fd)
            groups.remove(name)
            return groups, f"cgroup v{groups.version}"
        except OSError as exc:
            reasons.append(f"{attempt.__name__[5:]}: {exc}")
    return None, "; ".join(reasons)
