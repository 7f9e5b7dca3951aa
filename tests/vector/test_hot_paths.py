"""The fast paths of a batch step agree with the general one, whatever the envs do.

``SyncVectorEnv.step`` with a list goes straight to the members, ``Member.step`` and its
SAME_STEP final reset skip the request loop, a one-env batch skips the transposing, and the
thread backend serves a batch from a shared queue. Each is held, over random scripts of actions
(episode ends, raising envs, contract breaches, every autoreset mode and ``on_error``), to the
general path: the same step served as a ``Step`` request through ``Member.handle``. The thread
backend must also run blocking envs all at once, and never more at once than ``max_threads``.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

import numpy as np
import pytest
from gem_vector_testenvs import make_async_count_env, make_count_env
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.core import Env
from gem_core.errors import ResetNeeded, VectorEnvError
from gem_core.vector import AsyncVectorEnv, SyncVectorEnv, VectorEnv
from gem_core.vector.member import Step

ACTIONS = ["a", "b", "end", "boom", "return:(1, 2)", "return:('o', 1.0, True, False, {})"]


def general_step(vec: VectorEnv, actions: list[str]) -> Any:
    """The step as ``Step`` requests through ``Member.handle`` (the general state machine)."""
    indices, acts = vec._prepare_step(actions)
    return vec._finish_step(indices, vec._run(indices, [Step(a) for a in acts], None))


def plain(value: Any) -> Any:
    """A comparable form: arrays as lists, tracebacks (whose frames differ by path) left out."""
    if isinstance(value, np.ndarray):
        return (str(value.dtype), value.tolist())
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if k != "traceback"}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def outcome(call: Any, *args: Any) -> Any:
    try:
        return ("ok", plain(call(*args)))
    except VectorEnvError as exc:
        message = str(exc).replace("AsyncVectorEnv", "SyncVectorEnv")  # the message names the class
        return ("VectorEnvError", message, plain(exc.results), sorted(exc.failures))
    except ResetNeeded as exc:
        return ("ResetNeeded", str(exc))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 4),
    mode=st.sampled_from(["next_step", "same_step", "disabled"]),
    on_error=st.sampled_from(["raise", "reset"]),
    script=st.lists(st.lists(st.sampled_from(ACTIONS), min_size=4, max_size=4), min_size=1, max_size=8),
    seed=st.integers(0, 2**16),
)
def test_fast_paths_match_the_general_one(n: int, mode: str, on_error: str, script: list[list[str]], seed: int) -> None:
    fn = functools.partial(make_count_env, 2)
    kwargs: dict[str, Any] = {"autoreset_mode": mode, "on_error": on_error}
    reference = SyncVectorEnv([fn] * n, **kwargs)
    fast = SyncVectorEnv([fn] * n, **kwargs)
    mapped = SyncVectorEnv([fn] * n, **kwargs)
    threaded = AsyncVectorEnv([fn] * n, max_threads=2, **kwargs)
    vecs: list[VectorEnv] = [reference, fast, mapped, threaded]
    try:
        for vec in vecs:
            vec.reset(seed=seed)
        for row in script:
            actions = row[:n]
            expected = outcome(general_step, reference, actions)
            assert outcome(fast.step, actions) == expected
            assert outcome(mapped.step, dict(enumerate(actions))) == expected
            assert outcome(threaded.step, tuple(actions)) == expected
            blocked = [i for i, stuck in enumerate(reference.needs_reset) if stuck]
            if blocked:  # failed or finished (autoreset disabled): start them over everywhere
                resets = {plain(vec.reset(indices=blocked)).__repr__() for vec in vecs}
                assert len(resets) == 1
    finally:
        for vec in vecs:
            vec.close()


class RendezvousEnv(Env):
    """Each step waits at a shared barrier (releasing the GIL, as I/O does) and counts the envs inside step."""

    def __init__(self, barrier: threading.Barrier | None, inside: list[int], lock: threading.Lock) -> None:
        self.barrier, self.inside, self.lock = barrier, inside, lock

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        return "start", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        with self.lock:
            self.inside[0] += 1
            self.inside[1] = max(self.inside[1], self.inside[0])
        try:
            if self.barrier is not None:
                self.barrier.wait(timeout=10)  # broken (an error) unless `parties` envs are in step at once
            else:
                time.sleep(0.01)
        finally:
            with self.lock:
                self.inside[0] -= 1
        return action, 0.0, False, False, {"thread": threading.current_thread().name}


@pytest.mark.parametrize(
    ("num_envs", "max_threads", "with_async_env"),
    [(2, 2, False), (8, 8, False), (8, 8, True), (64, 64, False)],
    ids=["2-envs", "8-envs", "8-envs-beside-an-async-env", "64-envs"],
)
def test_thread_backend_runs_blocking_envs_all_at_once(num_envs: int, max_threads: int, with_async_env: bool) -> None:
    """As many blocking envs as threads are inside step at the same time, batch after batch."""
    barrier, inside, lock = threading.Barrier(num_envs), [0, 0], threading.Lock()
    fns: list[Any] = [functools.partial(RendezvousEnv, barrier, inside, lock)] * num_envs
    if with_async_env:
        fns.append(functools.partial(make_async_count_env, 2))
    with AsyncVectorEnv(fns, max_threads=max_threads) as vec:
        vec.reset(seed=0)
        for step in range(3):
            observations, *_ = vec.step([f"a{step}"] * len(fns))
            assert observations[:num_envs] == [f"a{step}"] * num_envs
    assert inside[1] == num_envs


@pytest.mark.parametrize(
    ("num_envs", "max_threads"), [(5, 1), (9, 2), (30, 4)], ids=["1-thread", "2-threads", "4-threads"]
)
def test_thread_backend_never_runs_more_envs_at_once_than_max_threads(num_envs: int, max_threads: int) -> None:
    inside, lock = [0, 0], threading.Lock()
    fns = [functools.partial(RendezvousEnv, None, inside, lock)] * num_envs
    with AsyncVectorEnv(fns, max_threads=max_threads) as vec:
        vec.reset(seed=0)
        for step in range(3):
            observations, *_ = vec.step([f"a{step}"] * num_envs)
            assert observations == [f"a{step}"] * num_envs
    assert 1 <= inside[1] <= max_threads
