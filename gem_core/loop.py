"""An event loop in a background thread, for tool state that must outlive the caller's loop.

Connections (an MCP session, an HTTP connection pool) are bound to the event loop that
opened them, but a tool is called from many loops: ``asyncio.run`` per step in a sync
env, one loop per worker thread in a vector env. :class:`LoopThread` owns one private
loop; tools open their connections there once and every caller, from any loop or
thread, forwards work to it. Batching across callers then comes for free.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread"]

_T = TypeVar("_T")

#: Every started loop thread, closed at interpreter exit so subprocesses and sockets are released.
_LIVE: weakref.WeakSet[LoopThread] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for loop_thread in list(_LIVE):
        loop_thread.close(timeout_s=2.0)


class LoopThread:
    """A private asyncio loop running in a daemon thread, started on first use.

    Args:
        name: Thread name, shown in debuggers and thread dumps.

    Example:
        >>> lt = LoopThread("demo")
        >>> async def add(a, b):
        ...     return a + b
        >>> lt.run_sync(add(1, 2))
        3
        >>> lt.close()
    """

    def __init__(self, name: str = "gem-loop") -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    @property
    def started(self) -> bool:
        """True once the thread was started (by the first :meth:`submit`)."""
        return self._loop is not None

    def in_loop(self) -> bool:
        """True when called from inside this loop's thread."""
        return self._thread is not None and threading.current_thread() is self._thread

    def _ensure_started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"loop thread {self.name!r} is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def main() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=main, name=self.name, daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
                _LIVE.add(self)
            return self._loop

    def submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Schedule ``coro`` on the background loop; returns a thread-safe future."""
        try:
            loop = self._ensure_started()
        except RuntimeError:
            coro.close()  # never awaited: close it so Python does not warn
            raise
        return asyncio.run_coroutine_threadsafe(coro, loop)

    async def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Await ``coro`` on the background loop from any other loop.

        Cancelling the caller (e.g. with :func:`asyncio.wait_for`) cancels ``coro`` too.
        Called from the background loop itself, ``coro`` is simply awaited.
        """
        if self.in_loop():
            return await coro
        return await asyncio.wrap_future(self.submit(coro))

    def run_sync(self, coro: Coroutine[Any, Any, _T], timeout_s: float | None = None) -> _T:
        """Block the calling thread until ``coro`` finishes on the background loop.

        Raises:
            RuntimeError: called from the background loop itself (it would deadlock).
            TimeoutError: ``timeout_s`` passed; ``coro`` is cancelled.
        """
        if self.in_loop():
            coro.close()
            raise RuntimeError(f"run_sync called from inside loop thread {self.name!r}; await run() instead")
        future = self.submit(coro)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"{self.name}: call did not finish within {timeout_s} s") from None

    async def aclose(self, timeout_s: float = 5.0, *, before: Callable[[], Awaitable[Any]] | None = None) -> None:
        """Async :meth:`close`, from another event loop (joining the thread runs in a worker thread)."""
        if self._closed:
            return
        try:
            if before is not None and self.started:
                await asyncio.wait_for(self.run(_awaited(before)), timeout_s)
        finally:
            await asyncio.to_thread(self.close, timeout_s)

    def close(self, timeout_s: float = 5.0, *, before: Callable[[], Awaitable[Any]] | None = None) -> None:
        """Cancel pending tasks, stop the loop and join the thread; idempotent.

        Args:
            timeout_s: Limit for each shutdown step.
            before: Coroutine function run on the loop first, if it was ever started, so an
                owner can release its connections gracefully; tasks still pending after it
                are cancelled.
        """
        try:
            if before is not None and self.started and not self._closed:
                self.run_sync(_awaited(before), timeout_s)
        finally:
            self._stop_loop(timeout_s)

    def _stop_loop(self, timeout_s: float) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        _LIVE.discard(self)
        if loop is None or thread is None:
            return
        if thread is threading.current_thread():
            raise RuntimeError(f"loop thread {self.name!r} cannot close itself")

        async def drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await loop.shutdown_asyncgens()
            await loop.shutdown_default_executor()

        # A task that refuses to die must not block shutdown: stop anyway, the thread is a daemon.
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(drain(), loop).result(timeout_s)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)
        if not thread.is_alive():
            loop.close()


async def _awaited(factory: Callable[[], Awaitable[Any]]) -> Any:
    return await factory()
