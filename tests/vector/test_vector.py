from __future__ import annotations

import asyncio
import functools
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gem_vector_testenvs import CountEnv, make_async_count_env, make_count_env

from gem_core.errors import ConfigError, ResetNeeded, VectorEnvError
from gem_core.registry import EnvSpec, Registry
from gem_core.vector import (
    AsyncVectorEnv,
    AutoresetMode,
    ProcessEnv,
    SyncVectorEnv,
    VectorEnv,
    episode_seed,
    episode_seeds,
    make_vec,
)

KINDS = ["sync", "async-thread", "async-inline", "async-native", "async-process"]


def build(kind: str, n: int = 3, episode_length: int = 3, **vec_kwargs: Any) -> VectorEnv:
    """One vector env of ``n`` CountEnvs, run the way ``kind`` says."""
    if kind == "sync":
        return SyncVectorEnv([functools.partial(make_count_env, episode_length)] * n, **vec_kwargs)
    if kind == "async-native":
        return AsyncVectorEnv([functools.partial(make_async_count_env, episode_length)] * n, **vec_kwargs)
    if kind == "async-process":
        fns = [ProcessEnv(functools.partial(make_count_env, episode_length))] * n
        return AsyncVectorEnv(fns, max_processes=2, **vec_kwargs)
    sync_envs = "inline" if kind == "async-inline" else "thread"
    return AsyncVectorEnv([functools.partial(make_count_env, episode_length)] * n, sync_envs=sync_envs, **vec_kwargs)


@pytest.fixture(params=KINDS, ids=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def vec_factory(kind: str) -> Any:
    made: list[VectorEnv] = []

    def factory(**kwargs: Any) -> VectorEnv:
        made.append(build(kind, **kwargs))
        return made[-1]

    yield factory
    for vec in made:
        vec.close()


def tag_of(obs: str) -> int:
    return int(obs.split()[1])


def test_next_step_keeps_final_obs_and_resets_on_next_call(vec_factory: Callable[..., VectorEnv]) -> None:
    vec = vec_factory(n=2, episode_length=2, autoreset_mode="next_step")
    assert vec.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    obs, _ = vec.reset(seed=1)
    first_tags = [tag_of(o) for o in obs]
    vec.step(["a", "a"])
    obs, rew, term, trunc, infos = vec.step(["b", "b"])
    assert obs == [f"ep {t} t 2 b" for t in first_tags]  # the final observation itself
    assert term.tolist() == [True, True] and trunc.tolist() == [False, False]
    assert rew.dtype == np.float64 and rew.tolist() == [2.0, 2.0]
    assert [i["t"] for i in infos] == [2, 2]  # the final info itself
    obs, rew, term, trunc, infos = vec.step(["ignored", "ignored"])
    assert all(o.startswith("start ") for o in obs)
    assert rew.tolist() == [0.0, 0.0] and not term.any() and not trunc.any()
    assert all("final_obs" not in i for i in infos)
    assert [i["seed"] for i in infos] == [episode_seed(1, 0, 1), episode_seed(1, 1, 1)]


def test_same_step_puts_final_obs_and_info_in_reset_info(vec_factory: Callable[..., VectorEnv]) -> None:
    vec = vec_factory(n=2, episode_length=2, autoreset_mode="same_step")
    obs, _ = vec.reset(seed=2)
    first_tags = [tag_of(o) for o in obs]
    vec.step(["a", "a"])
    obs, rew, term, _, infos = vec.step(["b", "b"])
    assert all(o.startswith("start ") for o in obs)
    assert term.tolist() == [True, True] and rew.tolist() == [2.0, 2.0]
    for info, tag in zip(infos, first_tags, strict=True):
        assert info["final_obs"] == f"ep {tag} t 2 b"
        assert info["final_info"] == {"t": 2, "tag": tag}
    obs, _, term, _, _ = vec.step(["c", "c"])  # the new episode goes on normally
    assert not term.any() and all(" t 1 c" in o for o in obs)


def test_disabled_requires_explicit_reset(vec_factory: Callable[..., VectorEnv]) -> None:
    vec = vec_factory(n=2, episode_length=1, autoreset_mode="disabled")
    vec.reset(seed=3)
    _, _, term, _, _ = vec.step(["a", "a"])
    assert term.all()
    assert vec.needs_reset == [True, True]
    with pytest.raises(ResetNeeded, match="env 0 finished its episode"):
        vec.step(["a", "a"])
    obs, _ = vec.reset(indices=[1])
    assert len(obs) == 1 and obs[0].startswith("start ")
    obs, *_ = vec.step({1: "x"})
    assert obs == [obs[0]] and obs[0].endswith("t 1 x")


def test_subset_step_only_touches_listed_envs(vec_factory: Callable[..., VectorEnv]) -> None:
    vec = vec_factory(n=3, episode_length=5)
    vec.reset(seed=4)
    obs, _rew, *_, infos = vec.step({2: "x", 0: "y"})
    assert len(obs) == 2 and [i["t"] for i in infos] == [1, 1]
    assert obs[0].endswith("t 1 x") and obs[1].endswith("t 1 y")  # mapping order
    obs, *_ = vec.step(["p", "q", "r"])
    assert [o.split()[3] for o in obs] == ["2", "1", "2"]  # env 1 was never stepped before


def test_subset_step_keeps_pending_autoreset(vec_factory: Callable[..., VectorEnv]) -> None:
    vec = vec_factory(n=2, episode_length=1, autoreset_mode="next_step")
    vec.reset(seed=5)
    vec.step({0: "a"})
    vec.step({1: "a"})  # env 0's pending autoreset waits for env 0's next step
    obs, *_ = vec.step({0: "b"})
    assert obs[0].startswith("start ")


def run_trace(vec: VectorEnv, seed: int, steps: int = 12) -> list[Any]:
    obs, infos = vec.reset(seed=seed)
    trace: list[Any] = [list(obs)]
    for k in range(steps):
        actions = {i: f"a{k}" for i in range(vec.num_envs) if (i + k) % 3}  # ragged
        obs, rew, term, _trunc, infos = vec.step(actions)
        trace.append((obs, rew.tolist(), term.tolist(), [i.get("final_obs") for i in infos]))
    return trace


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_whole_run_replays_from_one_seed(vec_factory: Callable[..., VectorEnv], mode: str) -> None:
    first = run_trace(vec_factory(n=3, episode_length=2, autoreset_mode=mode), seed=123)
    second = run_trace(vec_factory(n=3, episode_length=2, autoreset_mode=mode), seed=123)
    other = run_trace(vec_factory(n=3, episode_length=2, autoreset_mode=mode), seed=124)
    assert first == second
    assert first != other
    assert len({tag_of(o) for o in first[0]}) == 3  # envs get different seeds


def test_every_class_replays_the_same_run() -> None:
    traces = []
    for kind in KINDS:
        with build(kind, n=2, episode_length=2, autoreset_mode="same_step") as vec:
            traces.append(run_trace(vec, seed=7, steps=6))
    assert all(t == traces[0] for t in traces[1:])


def test_unseeded_reset_records_a_root_seed_that_replays(vec_factory: Callable[..., VectorEnv]) -> None:
    vec = vec_factory(n=2)
    obs, _ = vec.reset()
    assert vec.root_seed is not None
    again = vec_factory(n=2)
    assert again.reset(seed=vec.root_seed)[0] == obs


def test_episode_seed_matches_seed_sequence_spawning() -> None:
    words = np.random.SeedSequence(9, spawn_key=(2, 1)).generate_state(64, np.uint64)
    assert episode_seed(9, 2, 64 + 5) == int(words[5]) >> 1
    assert len({episode_seed(9, i, k) for i in range(4) for k in range(100)}) == 400
    stream = episode_seeds(9, 3)
    assert [next(stream) for _ in range(130)] == [episode_seed(9, 3, k) for k in range(130)]


def test_failed_env_is_reported_and_others_keep_state(vec_factory: Callable[..., VectorEnv]) -> None:
    vec = vec_factory(n=3, episode_length=5)
    vec.reset(seed=6)
    with pytest.raises(VectorEnvError, match=r"env 1: RuntimeError: boom") as caught:
        vec.step(["a", "boom", "a"])
    assert list(caught.value.failures) == [1]
    assert isinstance(caught.value.failures[1], RuntimeError)
    obs, *_, infos = caught.value.results  # type: ignore[misc]
    assert obs[0].endswith("t 1 a") and obs[2].endswith("t 1 a")
    assert infos[1]["env_error"]["type"] == "RuntimeError"
    with pytest.raises(ResetNeeded, match="env 1 raised an error"):
        vec.step(["b", "b", "b"])
    obs, *_ = vec.step({0: "b", 2: "b"})
    assert obs[0].endswith("t 2 b") and obs[1].endswith("t 2 b")
    vec.reset(indices=[1])
    obs, *_ = vec.step(["c", "c", "c"])
    assert [o.split()[3] for o in obs] == ["3", "1", "3"]


def test_on_error_reset_carries_on(vec_factory: Callable[..., VectorEnv]) -> None:
    vec = vec_factory(n=2, episode_length=5, on_error="reset")
    vec.reset(seed=7)
    obs, rew, term, trunc, infos = vec.step(["boom", "a"])
    assert obs[0].startswith("start ") and trunc.tolist() == [True, False] and not term.any()
    assert rew[0] == 0.0
    err = infos[0]["env_error"]
    assert err["index"] == 0 and err["type"] == "RuntimeError" and "boom" in err["message"]
    obs, *_ = vec.step(["x", "x"])
    assert obs[0].endswith("t 1 x") and obs[1].endswith("t 2 x")


def test_bad_calls_get_clear_errors(vec_factory: Callable[..., VectorEnv]) -> None:
    vec = vec_factory(n=2)
    with pytest.raises(ResetNeeded, match="never reset"):
        vec.step(["a", "a"])
    with pytest.raises(ValueError, match="reset all envs with the seed"):
        vec.reset(seed=1, indices=[0])
    vec.reset(seed=1)
    with pytest.raises(ValueError, match="got 1 actions for 2 envs"):
        vec.step(["a"])
    with pytest.raises(TypeError, match="single str"):
        vec.step("ab")
    with pytest.raises(IndexError, match="out of range"):
        vec.step({5: "a"})
    vec.close()
    vec.close()
    with pytest.raises(RuntimeError, match="closed"):
        vec.step(["a", "a"])


def test_reset_options_reach_each_env(vec_factory: Callable[..., VectorEnv]) -> None:
    vec = vec_factory(n=2)
    _, infos = vec.reset(seed=0, options=[{"idx": 0}, {"idx": 1}])
    assert [i["options"] for i in infos] == [{"idx": 0}, {"idx": 1}]
    _, infos = vec.reset(options={"idx": 9}, indices=[1])
    assert infos[0]["options"] == {"idx": 9}


def test_async_api_from_a_running_loop(vec_factory: Callable[..., VectorEnv]) -> None:
    vec = vec_factory(n=2, episode_length=2)

    async def main() -> list[str]:
        await vec.areset(seed=3)
        obs, *_ = await vec.astep(["a", "b"])
        return obs

    assert [o.split()[-1] for o in asyncio.run(main())] == ["a", "b"]


# ---------------------------------------------------------------------- resources


def child_pids() -> set[int]:
    me = str(os.getpid())
    pids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z":
            pids.add(int(stat.parent.name))
    return pids


def alive(pid: int) -> bool:
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


pytestmark_linux = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


@pytestmark_linux
def test_close_leaves_no_threads_or_processes(kind: str) -> None:
    threads_before = set(threading.enumerate())
    children_before = child_pids()
    vec = build(kind, n=3)
    vec.reset(seed=0)
    vec.step(["a"] * 3)
    vec.close()
    assert wait_until(lambda: set(threading.enumerate()) <= threads_before), threading.enumerate()
    assert wait_until(lambda: child_pids() <= children_before)


@pytestmark_linux
def test_close_kills_processes_started_by_worker_envs() -> None:
    fns = [ProcessEnv(functools.partial(make_count_env, 3, True))] * 2
    vec = AsyncVectorEnv(fns, max_processes=2)
    _, infos = vec.reset(seed=0)
    grandchildren = [info["child_pid"] for info in infos]
    assert all(alive(pid) for pid in grandchildren)
    workers = [w.process.pid for w in vec.workers]
    vec.close()
    assert wait_until(lambda: not any(alive(p) for p in grandchildren + workers)), "leaked processes"


# ---------------------------------------------------------------------- make_vec


@pytest.fixture
def registry() -> Registry:
    reg = Registry()
    reg.add(EnvSpec(id="test:Count-v0", entry_point="gem_vector_testenvs:CountEnv", kwargs={"episode_length": 2}))
    reg.add(EnvSpec(id="test:Count-v0-heavy", entry_point="gem_vector_testenvs:CountEnv", cpu_bound=True))
    reg.add(EnvSpec(id="test:AsyncCount-v0", entry_point="gem_vector_testenvs:AsyncCountEnv"))
    return reg


def test_make_vec_cycles_ids_and_picks_how_each_env_runs(registry: Registry) -> None:
    ids = ["test:Count-v0", "test:Count-v0-heavy", "test:AsyncCount-v0"]
    with make_vec(ids, 4, vectorization="async", registry=registry, max_processes=1) as vec:
        assert isinstance(vec, AsyncVectorEnv)
        assert vec.member_kinds == ["thread", "process", "async", "thread"]
        obs, _ = vec.reset(seed=0)
        assert all(o.startswith("start ") for o in obs)
    with make_vec("test:Count-v0", 2, registry=registry, episode_length=4) as sync_vec:
        assert isinstance(sync_vec, SyncVectorEnv)
        assert [e.episode_length for e in sync_vec.envs] == [4, 4]  # type: ignore[attr-defined]


def test_make_vec_applies_wrappers_by_name(registry: Registry) -> None:
    from gem_core.plugins import get_registry

    for spec in get_registry().wrappers.values():
        registry.add(spec)
    with make_vec("test:Count-v0", 2, registry=registry, wrappers=[("max_turns", {"max_turns": 1})]) as vec:
        vec.reset(seed=0)
        _, _, term, trunc, _ = vec.step(["a", "a"])
        assert trunc.all() and not term.any()


def test_make_vec_rejects_bad_arguments(registry: Registry) -> None:
    with pytest.raises(ConfigError, match="num_envs"):
        make_vec("test:Count-v0", 0, registry=registry)
    with pytest.raises(ConfigError, match="vectorization"):
        make_vec("test:Count-v0", 1, vectorization="threads", registry=registry)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="autoreset_mode"):
        make_vec("test:Count-v0", 1, autoreset_mode="sometimes", registry=registry)
    with pytest.raises(ConfigError, match="processes=True needs"):
        make_vec("test:Count-v0", 1, processes=True, registry=registry)


def test_unpicklable_process_env_fails_clearly() -> None:
    env = CountEnv()
    with pytest.raises(ConfigError, match="cannot build env 0 in a worker process"):
        AsyncVectorEnv([ProcessEnv(lambda: env)], max_processes=1)
