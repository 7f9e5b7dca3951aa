"""Envs for the vector tests, in a plain module so worker processes can import them.

``tests/vector/conftest.py`` puts this directory on ``sys.path``; spawned workers inherit it.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gem_core.core import AsyncEnv, Env, ResetReturn, StepReturn
from gem_core.errors import ConfigError
from gem_core.testing import FaultyEnv
from gem_core.vector import AsyncVectorEnv, ProcessEnv, ProcessVectorEnv, SyncVectorEnv, VectorEnv


class CountEnv(Env):
    """Counts steps; each episode starts with a number drawn from the env's RNG.

    The action ``"boom"`` raises, to test error isolation; ``"end"`` terminates early;
    ``"exit"`` kills the process the env runs in; ``"sleep"`` blocks for a while;
    ``"return:<literal>"`` returns that Python literal instead of a step tuple (a contract breach).
    """

    def __init__(self, episode_length: int = 3, spawn_child: bool = False) -> None:
        self.episode_length = episode_length
        self.spawn_child = spawn_child
        self.children: list[subprocess.Popen[bytes]] = []
        self.t = 0
        self.tag = -1

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        self.t = 0
        self.tag = int(self.np_random.integers(1_000_000))
        info: dict[str, Any] = {"seed": seed, "options": options}
        if self.spawn_child:  # a process the env starts and never cleans up
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
            self.children.append(child)
            info["child_pid"] = child.pid
        return f"start {self.tag}", info

    def step(self, action: str) -> StepReturn:
        if action == "boom":
            raise RuntimeError(f"boom in episode {self.tag}")
        if action == "exit":
            os._exit(3)
        if action == "sleep":
            time.sleep(3.0)
        if action.startswith("return:"):
            return ast.literal_eval(action[len("return:") :])  # type: ignore[no-any-return]
        self.t += 1
        done = self.t >= self.episode_length or action == "end"
        return f"ep {self.tag} t {self.t} {action}", float(self.t), done, False, {"t": self.t, "tag": self.tag}


class AsyncCountEnv(AsyncEnv):
    """:class:`CountEnv` as a native async env."""

    def __init__(self, episode_length: int = 3) -> None:
        self.inner = CountEnv(episode_length)

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        await asyncio.sleep(0)
        return self.inner.reset(seed=seed, options=options)

    async def step(self, action: str) -> StepReturn:
        await asyncio.sleep(30.0 if action == "asleep" else 0)  # "asleep": hangs, but can be cancelled
        return self.inner.step(action)


def make_count_env(episode_length: int = 3, spawn_child: bool = False) -> Env:
    return CountEnv(episode_length, spawn_child)


def make_async_count_env(episode_length: int = 3) -> AsyncEnv:
    return AsyncCountEnv(episode_length)


def make_broken_env() -> Env:
    raise ConfigError("broken_env: bad config for the test")


def make_exiting_env() -> Env:
    os._exit(4)


class CloseFailsEnv(CountEnv):
    """A CountEnv whose ``close`` raises."""

    def close(self) -> None:
        raise RuntimeError("close failed")


def make_close_failing_env() -> Env:
    return CloseFailsEnv()


def actor_is_dead(actor: Any, timeout: float = 30.0) -> bool:
    """Wait until a Ray actor answers no more (``ray.kill`` is asynchronous: a call right after it may still run)."""
    import ray

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(actor.serve.remote("split", pickle.dumps(None)), timeout=timeout)
        except ray.exceptions.RayActorError:
            return True
        time.sleep(0.1)
    return False


# ---------------------------------------------------------------------- the backends under test

LOCAL_KINDS = ["sync", "async-thread", "async-inline", "async-native"]
REMOTE_KINDS = ["async-process", "process", "ray"]  # envs in other processes: they can crash alone
KINDS = LOCAL_KINDS + REMOTE_KINDS


def build(
    kind: str, n: int = 3, episode_length: int = 3, factory: Callable[..., Any] = make_count_env, **vec_kwargs: Any
) -> VectorEnv:
    """One vector env of ``n`` CountEnvs, run the way ``kind`` says (``n // 2`` worker processes or actors)."""
    fn = functools.partial(factory, episode_length) if factory is make_count_env else factory
    if kind == "sync":
        return SyncVectorEnv([fn] * n, **vec_kwargs)
    if kind == "async-native":
        return AsyncVectorEnv([functools.partial(make_async_count_env, episode_length)] * n, **vec_kwargs)
    if kind == "async-process":
        return AsyncVectorEnv([ProcessEnv(fn)] * n, max_processes=max(1, n // 2), **vec_kwargs)
    if kind == "process":
        return ProcessVectorEnv([fn] * n, max_processes=max(1, n // 2), **vec_kwargs)
    if kind == "ray":
        from gem_core.vector.ray import RayVectorEnv

        # the layout of the process kinds: every actor start costs seconds
        return RayVectorEnv([fn] * n, num_cpus=0.5, envs_per_actor=-(-n // max(1, n // 2)), **vec_kwargs)
    sync_envs = "inline" if kind == "async-inline" else "thread"
    return AsyncVectorEnv([fn] * n, sync_envs=sync_envs, **vec_kwargs)


def make_faulty_count_env(
    fault: str, fail_at: int, seeds: tuple[int, ...], episode_length: int = 4, hang_s: float = 600.0
) -> Env:
    """A :class:`CountEnv` in a ``FaultyEnv``: ``fault`` at step ``fail_at`` of the episodes of ``seeds``."""
    return FaultyEnv(CountEnv(episode_length), fail_at=fail_at, seeds=seeds, fault=fault, hang_s=hang_s)


def alive_pid(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()
