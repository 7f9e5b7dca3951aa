"""LoopThread: a private event loop in a daemon thread, shared by callers on any loop or thread."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gem_core.loop import LoopThread


async def add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


async def boom() -> None:
    raise ValueError("bad value")


@pytest.fixture
def lt() -> LoopThread:
    loop_thread = LoopThread("test-loop")
    yield loop_thread
    loop_thread.close()


def test_starts_lazily_and_runs_coroutines(lt: LoopThread) -> None:
    assert not lt.started
    assert lt.run_sync(add(1, 2)) == 3
    assert lt.started and any(t.name == "test-loop" for t in threading.enumerate())


def test_awaitable_from_other_loops_and_threads(lt: LoopThread) -> None:
    async def on_own_loop() -> tuple[int, bool]:
        async def where() -> bool:
            return lt.in_loop()

        return await lt.run(add(2, 3)), await lt.run(where())

    assert asyncio.run(on_own_loop()) == (5, True)
    results: list[int] = []
    threads = [threading.Thread(target=lambda i=i: results.append(asyncio.run(lt.run(add(i, 0))))) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [0, 1, 2, 3]


def test_exceptions_propagate(lt: LoopThread) -> None:
    with pytest.raises(ValueError, match="bad value"):
        lt.run_sync(boom())
    with pytest.raises(ValueError, match="bad value"):
        asyncio.run(lt.run(boom()))


def test_cancelling_the_caller_cancels_the_coroutine(lt: LoopThread) -> None:
    cancelled = threading.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(asyncio.wait_for(lt.run(slow()), 0.1))
    assert cancelled.wait(5)


def test_run_sync_timeout(lt: LoopThread) -> None:
    with pytest.raises(TimeoutError, match=r"within 0\.05 s"):
        lt.run_sync(asyncio.sleep(5), timeout_s=0.05)


def test_run_sync_inside_the_loop_is_refused(lt: LoopThread) -> None:
    async def nested() -> None:
        lt.run_sync(add(1, 1))

    with pytest.raises(RuntimeError, match="await run"):
        lt.run_sync(nested())


def test_close_runs_before_hook_cancels_tasks_and_is_idempotent() -> None:
    lt = LoopThread("closing")
    released = []
    cancelled = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(100)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def release() -> None:
        released.append(lt.in_loop())

    lt.submit(forever())
    lt.close(before=release)
    lt.close(before=release)
    assert released == [True] and cancelled.is_set() and lt.closed
    assert not any(t.name == "closing" for t in threading.enumerate())
    with pytest.raises(RuntimeError, match="closed"):
        lt.submit(add(1, 1))  # the coroutine is closed, so no "never awaited" warning


def test_close_without_start_skips_before_hook() -> None:
    lt = LoopThread("never")
    called = []

    async def release() -> None:
        called.append(1)

    asyncio.run(lt.aclose(before=release))
    assert called == [] and lt.closed and not lt.started


def test_failing_before_hook_still_stops_the_loop() -> None:
    lt = LoopThread("failing-hook")
    lt.run_sync(add(1, 1))

    async def broken() -> None:
        raise OSError("socket already gone")

    with pytest.raises(OSError, match="already gone"):
        lt.close(before=broken)
    assert lt.closed and not any(t.name == "failing-hook" for t in threading.enumerate())
