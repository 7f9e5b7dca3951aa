"""The process backend: sub-envs in worker processes, several per worker, one message per batch.

Each worker is a ``spawn``-ed process that builds its envs from picklable factories (env
objects themselves may not pickle) and serves batches of requests over a pipe. A worker
starts its own process group, so closing it also kills any processes its envs started
(graders, sandboxes), even ones that outlive the worker. A worker that dies is replaced
(see :mod:`gem_core.vector.hosted`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import multiprocessing as mp
import os
import pickle
import signal
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from gem_core.core import AsyncEnv, Env
from gem_core.errors import ConfigError
from gem_core.vector.base import VectorEnv, check_timeout
from gem_core.vector.hosted import HOST_TAG, Host, HostDied, HostedGroup, MemberHost, decode, kill_tagged
from gem_core.vector.member import AutoresetMode, OnError, RemoteEnvError

__all__ = ["ProcessEnv", "ProcessVectorEnv", "RemoteEnvError", "WorkerHost", "split_evenly"]


@dataclass(frozen=True)
class ProcessEnv:
    """Marks a sub-env of an :class:`~gem_core.vector.AsyncVectorEnv` to be built and run in a worker process.

    Args:
        factory: A *picklable* callable (a module-level function or a ``functools.partial``
            of one) that builds the env inside the worker.
    """

    factory: Callable[[], Env | AsyncEnv]


def _serve(conn: Connection, current: Any, token: str) -> None:
    if hasattr(os, "setsid"):
        os.setsid()  # own process group: close() kills the envs' children with the worker
    os.environ[HOST_TAG] = token  # inherited by whatever the envs start, even past setsid: close() finds them
    host = MemberHost()

    def mark(index: int) -> None:
        current.value = index

    while True:
        try:
            op, data = conn.recv()
        except (EOFError, OSError):  # the parent went away
            break
        frame = host.serve(op, data, mark)
        current.value = -1
        conn.send_bytes(frame)
        if op == "shutdown":
            break
    conn.close()


class WorkerHost(Host):
    """One worker process and the parent's end of its pipe."""

    def __init__(self, indices: Sequence[int], context: Any = None) -> None:
        super().__init__(indices)
        self._ctx = context or mp.get_context("spawn")
        self._start()

    def _start(self) -> None:
        self.conn: Connection
        self.conn, child = self._ctx.Pipe()
        self.current = self._ctx.RawValue("q", -1)  # the env index being served, to name a crash's culprit
        self.token = uuid.uuid4().hex
        # not a daemon: envs may start their own multiprocessing children
        self.process = self._ctx.Process(
            target=_serve, args=(child, self.current, self.token), name="gem-vector-worker"
        )
        self.process.start()
        child.close()
        self._dead = False
        self.closed = False

    def describe(self) -> str:
        return f"worker process {self.process.pid}"

    def send(self, op: str, data: bytes) -> None:
        if self._dead:
            return
        try:
            self.conn.send((op, data))
        except OSError:  # BrokenPipeError and friends: the worker is gone; receive() says how
            self._dead = True

    def receive(self, timeout: float | None = None) -> bytes:
        if not self._dead:
            try:
                if timeout is not None and not self.conn.poll(timeout):
                    culprit = int(self.current.value)
                    raise HostDied(culprit if culprit >= 0 else None, f"no reply within {timeout:g}s", timed_out=True)
                return self.conn.recv_bytes()
            except (EOFError, OSError):
                self._dead = True
        self.process.join(2.0)
        culprit = int(self.current.value)
        code = self.process.exitcode
        detail = f"exit code {code}" if code is None or code >= 0 else f"killed by signal {-code}"
        raise HostDied(culprit if culprit >= 0 else None, detail)

    def restart(self) -> None:
        self._stop(timeout=1.0)
        self._start()

    def close(self) -> list[BaseException]:
        if self.closed:
            return []
        errors: list[BaseException] = []
        if not self._dead:
            with contextlib.suppress(Exception):
                self.conn.send(("shutdown", pickle.dumps(None)))
                if self.conn.poll(10.0):
                    errors = list(decode(self.conn.recv_bytes()))
        self._stop(timeout=5.0)
        return errors

    def _stop(self, timeout: float) -> None:
        """Stop the process and kill whatever its envs started (its process group, anything tagged); never raises."""
        self.closed = True
        with contextlib.suppress(Exception):
            self.process.join(timeout)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout)
        pid = self.process.pid
        if pid is not None and hasattr(os, "killpg"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            kill_tagged(self.token)
        with contextlib.suppress(Exception):
            self.conn.close()
        with contextlib.suppress(Exception):
            self.process.close()


def split_evenly(indices: Sequence[int], parts: int) -> list[list[int]]:
    """``indices`` cut into ``parts`` contiguous runs whose sizes differ by at most one."""
    size, extra = divmod(len(indices), parts)
    runs, start = [], 0
    for p in range(parts):
        end = start + size + (p < extra)
        runs.append(list(indices[start:end]))
        start = end
    return [r for r in runs if r]


def process_group(
    factories: dict[int, Callable[[], Env | AsyncEnv]],
    autoreset_mode: AutoresetMode,
    on_error: OnError,
    max_processes: int | None,
    step_timeout: float | None = None,
) -> HostedGroup:
    """The envs of ``factories`` spread evenly over ``max_processes`` workers (default: one per CPU)."""
    if max_processes is not None and max_processes < 1:
        raise ConfigError(f"max_processes must be >= 1, got {max_processes}")
    workers = min(len(factories), max_processes or os.cpu_count() or 1)
    hosts: list[Host] = []
    try:
        for part in split_evenly(sorted(factories), workers):
            hosts.append(WorkerHost(part))
    except BaseException:
        for host in hosts:
            host.close()
        raise
    return HostedGroup(hosts, factories, autoreset_mode, on_error, step_timeout=step_timeout)


class ProcessVectorEnv(VectorEnv):
    """Runs every sub-env in worker processes (``backend="process"``).

    For CPU-heavy envs (code grading, simulators): steps run in parallel on up to
    ``max_processes`` cores. Envs are spread evenly over the workers and a batch costs one
    message per worker, so many cheap envs per worker stay cheap. An env that kills its
    worker (``os._exit``, a segfault, the OOM killer) takes only that worker's envs with it:
    the worker is replaced, their next ``step`` fails with
    :class:`~gem_core.errors.EnvWorkerCrashed` (or, with ``on_error="reset"``, they start
    a new episode), and the envs in other workers carry on. ``max_processes=num_envs`` gives
    every env its own worker. See :class:`~gem_core.vector.VectorEnv` for the rest.

    Args:
        env_fns: One *picklable* callable per sub-env (a module-level function or a
            ``functools.partial`` of one); it runs inside the worker.
        autoreset_mode: ``"next_step"`` (default), ``"same_step"`` or ``"disabled"``.
        on_error: ``"raise"`` (default) or ``"reset"``.
        max_processes: Number of workers; default ``os.cpu_count()``, never more than ``len(env_fns)``.
        step_timeout: Seconds a batch may take in a worker (``None``: no limit). A worker that
            misses it is killed and replaced: the env it was running fails with
            :class:`~gem_core.errors.EnvStepTimeout`, the others of that worker with
            :class:`~gem_core.errors.EnvWorkerCrashed` (``on_error`` applies to both).

    Raises:
        ConfigError: a factory does not pickle.
        EnvWorkerCrashed: a worker died while building its envs.
        Exception: an env's constructor raised; the exception is raised as itself.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Env | AsyncEnv]],
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        on_error: OnError = "raise",
        max_processes: int | None = None,
        step_timeout: float | None = None,
    ) -> None:
        super().__init__(len(env_fns), autoreset_mode, on_error)
        check_timeout("step_timeout", step_timeout)
        group = process_group(dict(enumerate(env_fns)), self.autoreset_mode, on_error, max_processes, step_timeout)
        self._set_groups([group])
        self.workers = group.hosts
        close_at_exit(self)


def close_at_exit(vec: VectorEnv) -> None:
    """Close ``vec`` at interpreter exit if the caller forgot: exit would otherwise wait on its workers forever."""
    closer = functools.partial(_close_if_alive, weakref.ref(vec))
    atexit.register(closer)
    weakref.finalize(vec, atexit.unregister, closer)


def _close_if_alive(ref: weakref.ref[VectorEnv]) -> None:
    vec = ref()
    if vec is not None:
        vec.close()
