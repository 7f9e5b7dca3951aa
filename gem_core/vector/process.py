"""Worker processes hosting CPU-heavy sub-envs.

Each worker is a ``spawn``-ed process that builds its envs from picklable factories
(env objects themselves may not pickle) and serves ``reset``/``step``/``close`` over a
pipe. A worker starts its own process group, so closing it also kills any processes
its envs started (graders, sandboxes), even ones that outlive the worker.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import signal
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from gem_core.core import AsyncEnv, Env, to_sync

__all__ = ["ProcessEnv", "RemoteEnvError", "Worker"]


@dataclass(frozen=True)
class ProcessEnv:
    """Marks a sub-env to be built and run in a worker process.

    Args:
        factory: A *picklable* callable (a module-level function or a ``functools.partial``
            of one) that builds the env inside the worker.
    """

    factory: Callable[[], Env | AsyncEnv]


class RemoteEnvError(RuntimeError):
    """An env in a worker process raised an exception that could not be sent back as itself."""


def _portable(exc: BaseException) -> BaseException:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        clone = pickle.loads(pickle.dumps(exc))
    except Exception:
        return RemoteEnvError(f"{type(exc).__name__}: {exc}\n(in the worker process)\n{tb}")
    if hasattr(clone, "add_note"):
        clone.add_note(f"raised in a gem_core worker process:\n{tb}")
    return clone  # type: ignore[no-any-return]


def _serve(conn: Connection) -> None:
    if hasattr(os, "setsid"):
        os.setsid()  # own process group: close() kills the env's children with the worker
    envs: dict[int, Env] = {}
    while True:
        try:
            op, slot, args = conn.recv()
        except (EOFError, OSError):  # the parent went away
            break
        try:
            if op == "make":
                envs[slot] = to_sync(args[0]())
                value: Any = None
            elif op == "reset":
                value = envs[slot].reset(seed=args[0], options=args[1])
            elif op == "step":
                value = envs[slot].step(args[0])
            elif op == "close":
                env = envs.pop(slot, None)
                if env is not None:
                    env.close()
                value = None
            elif op == "shutdown":
                for env in envs.values():
                    with contextlib.suppress(Exception):
                        env.close()
                conn.send(("ok", None))
                break
            else:
                raise ValueError(f"unknown worker op {op!r}")
            conn.send(("ok", value))
        except Exception as exc:
            conn.send(("err", _portable(exc)))
    conn.close()


class Worker:
    """One worker process and the parent's end of its pipe (calls are serialized by a lock)."""

    def __init__(self, context: Any = None) -> None:
        ctx = context or mp.get_context("spawn")
        self.conn: Connection
        self.conn, child = ctx.Pipe()
        # not a daemon: envs may start their own multiprocessing children
        self.process = ctx.Process(target=_serve, args=(child,), name="gem-vector-worker", daemon=False)
        self.process.start()
        child.close()
        self._lock = threading.Lock()
        self.closed = False
        self._shutdown_sent = False

    def call(self, op: str, slot: int, args: tuple[Any, ...] = ()) -> Any:
        """Send one request and wait for its answer; re-raises the env's exception."""
        with self._lock:
            if self.closed:
                raise RuntimeError("the worker process is closed")
            try:
                self.conn.send((op, slot, args))
            except (pickle.PicklingError, AttributeError, TypeError) as exc:
                raise TypeError(f"cannot send {op!r} to a worker process: {exc} (arguments must pickle)") from exc
            try:
                status, value = self.conn.recv()
            except (EOFError, OSError) as exc:
                raise RuntimeError(
                    f"worker process {self.process.pid} died (exit code {self.process.exitcode})"
                ) from exc
        if status == "err":
            raise value
        return value

    def request_shutdown(self) -> None:
        """Ask the worker to close its envs and exit, without waiting."""
        with self._lock:
            if not self.closed and not self._shutdown_sent:
                self._shutdown_sent = True
                with contextlib.suppress(Exception):
                    self.conn.send(("shutdown", -1, ()))

    def shutdown(self, timeout: float = 5.0) -> None:
        """Close its envs, stop the process, and kill whatever is left of its process group."""
        self.request_shutdown()
        with self._lock:
            if self.closed:
                return
            self.closed = True
            with contextlib.suppress(Exception):
                if self.conn.poll(timeout):
                    self.conn.recv()
            self.process.join(timeout)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout)
            pid = self.process.pid
            if pid is not None and hasattr(os, "killpg"):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            self.conn.close()
            self.process.close()
