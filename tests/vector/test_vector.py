from __future__ import annotations

import asyncio
import functools
import os
import signal
import threading
from collections.abc import Callable, Iterator
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gem_vector_testenvs import (
    KINDS,
    LOCAL_KINDS,
    REMOTE_KINDS,
    CountEnv,
    actor_is_dead,
    alive_pid,
    build,
    make_broken_env,
    make_close_failing_env,
    make_count_env,
    make_exiting_env,
    wait_until,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.errors import ConfigError, EnvWorkerCrashed, ResetNeeded, VectorEnvError
from gem_core.registry import EnvSpec, Registry
from gem_core.vector import (
    AsyncVectorEnv,
    AutoresetMode,
    ProcessEnv,
    ProcessVectorEnv,
    SyncVectorEnv,
    VectorEnv,
    episode_seed,
    make_vec,
)


@pytest.fixture(params=KINDS, ids=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "ray":
        request.getfixturevalue("ray_instance")
    return str(request.param)


@pytest.fixture(params=REMOTE_KINDS, ids=REMOTE_KINDS)
def remote_kind(request: pytest.FixtureRequest) -> str:
    if request.param == "ray":
        request.getfixturevalue("ray_instance")
    return str(request.param)


@pytest.fixture
def vec_factory(kind: str) -> Iterator[Callable[..., VectorEnv]]:
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


@pytest.mark.usefixtures("ray_instance")
def test_every_backend_replays_the_same_run() -> None:
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


pytestmark_linux = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


@pytestmark_linux
def test_close_leaves_no_threads_or_processes(kind: str) -> None:
    resource_tracker.ensure_running()  # one per interpreter, started by the first spawn: not the vector env's
    threads_before = set(threading.enumerate())
    children_before = child_pids()
    vec = build(kind, n=3)
    vec.reset(seed=0)
    vec.step(["a"] * 3)
    if kind == "ray":  # Ray's own threads and processes belong to the Ray instance, not to the vector env
        actors = [host.actor for host in vec.actors]  # type: ignore[attr-defined]
        vec.close()
        assert all(actor_is_dead(actor) for actor in actors)
        return
    vec.close()
    assert wait_until(lambda: set(threading.enumerate()) <= threads_before), threading.enumerate()
    assert wait_until(lambda: child_pids() <= children_before)


@pytest.mark.parametrize("backend", [k for k in KINDS if k != "async-native"])  # the failing env is a sync env
def test_close_never_raises_and_keeps_the_envs_errors(
    backend: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    if backend == "ray":
        request.getfixturevalue("ray_instance")
    vec = build(backend, n=2, factory=make_close_failing_env)
    vec.reset(seed=0)
    vec.close()
    assert [str(e) for e in vec.close_errors] == ["close failed", "close failed"]
    assert "close failed" in caplog.text


@pytestmark_linux
def test_close_kills_processes_started_by_worker_envs() -> None:
    fns = [ProcessEnv(functools.partial(make_count_env, 3, True))] * 2
    vec = AsyncVectorEnv(fns, max_processes=2)
    _, infos = vec.reset(seed=0)
    grandchildren = [info["child_pid"] for info in infos]
    assert all(alive_pid(pid) for pid in grandchildren)
    workers = [w.process.pid for w in vec.workers]
    vec.close()
    assert wait_until(lambda: not any(alive_pid(p) for p in grandchildren + workers)), "leaked processes"


# ---------------------------------------------------------------------- crashes of workers and actors


def hosts_of(vec: VectorEnv, index: int) -> list[int]:
    """The env indices sharing ``index``'s worker process or actor."""
    hosts = vec.actors if hasattr(vec, "actors") else vec.workers  # type: ignore[attr-defined]
    return next(h.indices for h in hosts if index in h.indices)


def test_env_that_kills_its_worker_takes_only_its_host(remote_kind: str) -> None:
    with build(remote_kind, n=4, episode_length=5) as vec:
        vec.reset(seed=8)
        vec.step(["a"] * 4)
        lost = hosts_of(vec, 1)
        with pytest.raises(VectorEnvError, match="env 1: EnvWorkerCrashed") as caught:
            vec.step(["a", "exit", "a", "a"])
        assert sorted(caught.value.failures) == lost
        assert all(isinstance(e, EnvWorkerCrashed) for e in caught.value.failures.values())
        assert "while env 1 was running" in str(caught.value.failures[1])  # named, also for an actor of 2 envs
        obs = caught.value.results[0]  # type: ignore[index]
        for i in set(range(4)) - set(lost):
            assert obs[i].endswith("t 2 a")  # the other hosts' envs carried on
        with pytest.raises(ResetNeeded, match="raised an error"):
            vec.step(["b"] * 4)
        vec.reset(indices=lost)  # the replacement host serves them again
        obs, *_ = vec.step(["c"] * 4)
        assert [o.split()[3] for o in obs] == ["1" if i in lost else "3" for i in range(4)]


def test_crash_with_on_error_reset_starts_new_episodes(remote_kind: str) -> None:
    with build(remote_kind, n=4, episode_length=5, on_error="reset") as vec:
        vec.reset(seed=9)
        obs, rew, term, trunc, infos = vec.step(["a", "exit", "a", "a"])
        lost = hosts_of(vec, 1)
        for i in range(4):
            if i in lost:
                assert obs[i].startswith("start ") and trunc[i] and not term[i] and rew[i] == 0.0
                assert infos[i]["env_error"]["type"] == "EnvWorkerCrashed"
            else:
                assert obs[i].endswith("t 1 a") and "env_error" not in infos[i]
        obs, *_ = vec.step(["b"] * 4)
        assert [o.split()[3] for o in obs] == ["1" if i in lost else "2" for i in range(4)]


def test_crash_replays_the_seeds_of_a_run_without_it(remote_kind: str) -> None:
    # the crashed env's next episode gets the seed it would have had after an ordinary failure
    ref = build("sync", n=2, episode_length=5, on_error="reset")
    vec = build(remote_kind, n=2, episode_length=5, on_error="reset")
    with ref, vec:
        ref.reset(seed=3)
        vec.reset(seed=3)
        expected = ref.step(["a", "boom"])
        got = vec.step(["a", "exit"])
        assert got[0][1] == expected[0][1] and got[4][1]["seed"] == expected[4][1]["seed"]


def test_killing_the_host_mid_step_is_recovered(remote_kind: str) -> None:
    with build(remote_kind, n=2, episode_length=5, on_error="reset") as vec:
        vec.reset(seed=10)
        if remote_kind == "ray":
            ray = pytest.importorskip("ray")
            actor = next(h.actor for h in vec.actors if 1 in h.indices)  # type: ignore[attr-defined]
            kill = functools.partial(ray.kill, actor)
        else:
            pid = next(w.process.pid for w in vec.workers if 1 in w.indices)  # type: ignore[attr-defined]
            kill = functools.partial(os.kill, pid, signal.SIGKILL)
        timer = threading.Timer(0.5, kill)
        timer.start()
        obs, _, _, trunc, infos = vec.step({1: "sleep"})
        timer.join()
        assert obs[0].startswith("start ") and trunc[0]
        assert infos[0]["env_error"]["type"] == "EnvWorkerCrashed"
        obs, _, _, trunc, _ = vec.step(["x", "x"])
        assert obs[1].endswith("t 1 x")
        if 0 in hosts_of(vec, 1):  # lost with the host: recovered on its next step
            assert obs[0].startswith("start ") and trunc[0]
        else:
            assert obs[0].endswith("t 1 x")


def test_close_after_a_crash_does_not_raise(remote_kind: str) -> None:
    vec = build(remote_kind, n=2)
    vec.reset(seed=0)
    with pytest.raises(VectorEnvError):
        vec.step(["exit", "exit"])
    vec.close()
    vec.close()


@pytest.mark.parametrize("backend", ["sync", "async-thread", "process", "async-process", "ray"])
def test_build_errors_surface_as_themselves(backend: str, request: pytest.FixtureRequest) -> None:
    if backend == "ray":
        request.getfixturevalue("ray_instance")
    with pytest.raises(ConfigError, match="broken_env: bad config") as caught:
        build(backend, n=2, factory=make_broken_env)
    if backend in REMOTE_KINDS:
        assert any("while building env" in note for note in getattr(caught.value, "__notes__", []))


@pytest.mark.parametrize("backend", ["process", "ray"])
def test_worker_dying_while_building_is_named(backend: str, request: pytest.FixtureRequest) -> None:
    if backend == "ray":
        request.getfixturevalue("ray_instance")
    with pytest.raises(EnvWorkerCrashed, match="died while building env 0"):
        build(backend, n=1, factory=make_exiting_env)


def test_unpicklable_process_env_fails_clearly() -> None:
    env = CountEnv()
    with pytest.raises(ConfigError, match="must pickle"):
        AsyncVectorEnv([ProcessEnv(lambda: env)], max_processes=1)
    with pytest.raises(ConfigError, match="must pickle"):
        ProcessVectorEnv([lambda: env], max_processes=1)


def test_process_backend_spreads_envs_over_workers() -> None:
    with ProcessVectorEnv([functools.partial(make_count_env, 3)] * 5, max_processes=2) as vec:
        assert [w.indices for w in vec.workers] == [[0, 1, 2], [3, 4]]
    with pytest.raises(ConfigError, match="max_processes"):
        ProcessVectorEnv([make_count_env], max_processes=0)


# ---------------------------------------------------------------------- make_vec


@pytest.fixture
def registry() -> Registry:
    reg = Registry()
    reg.add(EnvSpec(id="test:Count-v0", entry_point="gem_vector_testenvs:CountEnv", kwargs={"episode_length": 2}))
    reg.add(
        EnvSpec(id="test:Count-v0-heavy", entry_point="gem_vector_testenvs:CountEnv", cpu_bound=True, num_cpus=0.25)
    )
    reg.add(EnvSpec(id="test:AsyncCount-v0", entry_point="gem_vector_testenvs:AsyncCountEnv"))
    return reg


def test_make_vec_cycles_ids_and_picks_how_each_env_runs(registry: Registry) -> None:
    ids = ["test:Count-v0", "test:Count-v0-heavy", "test:AsyncCount-v0"]
    with make_vec(ids, 4, backend="async", registry=registry, max_processes=1) as vec:
        assert isinstance(vec, AsyncVectorEnv)
        assert vec.member_kinds == ["thread", "process", "async", "thread"]
        obs, _ = vec.reset(seed=0)
        assert all(o.startswith("start ") for o in obs)
    with make_vec("test:Count-v0", 2, registry=registry, episode_length=4) as sync_vec:
        assert isinstance(sync_vec, SyncVectorEnv)
        assert [e.episode_length for e in sync_vec.envs] == [4, 4]  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", ["sync", "async", "process", "ray"])
def test_make_vec_backends_replay_the_same_run(
    backend: str, registry: Registry, request: pytest.FixtureRequest
) -> None:
    if backend == "ray":
        request.getfixturevalue("ray_instance")
    with make_vec("test:Count-v0", 3, registry=registry, autoreset_mode="same_step") as ref:
        expected = run_trace(ref, seed=11, steps=5)
    with make_vec("test:Count-v0", 3, backend=backend, registry=registry, autoreset_mode="same_step") as vec:  # type: ignore[arg-type]
        assert run_trace(vec, seed=11, steps=5) == expected


@pytest.mark.usefixtures("ray_instance")
def test_make_vec_ray_reserves_cpus_from_the_spec(registry: Registry) -> None:
    from gem_core.vector.ray import RayVectorEnv

    with make_vec(
        ["test:Count-v0-heavy", "test:Count-v0"], 4, backend="ray", registry=registry, envs_per_actor=2
    ) as vec:
        assert isinstance(vec, RayVectorEnv)
        # an actor serves its envs one at a time: it reserves the most one of them needs
        assert [(h.indices, h.num_cpus) for h in vec.actors] == [([0, 1], 1.0), ([2, 3], 1.0)]
    with make_vec("test:Count-v0", 2, backend="ray", registry=registry, num_cpus=0.5, envs_per_actor=1) as vec:
        assert [h.num_cpus for h in vec.actors] == [0.5, 0.5]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("old", "backend", "kinds"),
    [
        ({"vectorization": "sync"}, SyncVectorEnv, None),
        ({"vectorization": "async"}, AsyncVectorEnv, ["thread", "process"]),
        ({"vectorization": "async", "processes": False}, AsyncVectorEnv, ["thread", "thread"]),
        ({"vectorization": "async", "processes": True}, ProcessVectorEnv, None),
    ],
    ids=["sync", "async", "async-no-processes", "async-processes"],
)
def test_make_vec_old_arguments_still_work_with_a_warning(
    registry: Registry, old: dict[str, Any], backend: type, kinds: list[str] | None
) -> None:
    with pytest.warns(DeprecationWarning, match="use make_vec\\(..., backend="):
        vec = make_vec(["test:Count-v0", "test:Count-v0-heavy"], registry=registry, max_processes=1, **old)
    with vec:
        assert type(vec) is backend
        if kinds is not None:
            assert vec.member_kinds == kinds  # type: ignore[attr-defined]


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
    with pytest.raises(ConfigError, match="backend must be one of"):
        make_vec("test:Count-v0", 1, backend="threads", registry=registry)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="vectorization must be"):
        make_vec("test:Count-v0", 1, vectorization="threads", registry=registry)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="autoreset_mode"):
        make_vec("test:Count-v0", 1, autoreset_mode="sometimes", registry=registry)
    with pytest.raises(ConfigError, match="processes=True needs"):
        make_vec("test:Count-v0", 1, processes=True, registry=registry)
    with pytest.raises(ConfigError, match="pass backend= alone"):
        make_vec("test:Count-v0", 1, backend="sync", vectorization="sync", registry=registry)


# ---------------------------------------------------------------------- the result contract

_scalars = st.one_of(st.none(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5), st.booleans())


@st.composite
def bad_step_results(draw: st.DrawFn) -> Any:
    """Anything but a valid ``(str, number, bool, bool, dict)``: other types, other arities, one wrong field."""
    good: list[Any] = ["obs", 1.0, False, False, {}]
    kind = draw(st.sampled_from(["scalar", "arity", "field"]))
    if kind == "scalar":
        return draw(st.one_of(_scalars, st.lists(_scalars, max_size=5), st.dictionaries(st.text(max_size=3), _scalars)))
    if kind == "arity":
        n = draw(st.integers(0, 8).filter(lambda k: k != 5))
        return tuple(draw(st.lists(_scalars, min_size=n, max_size=n)))
    field = draw(st.integers(0, 4))
    wrong = {0: st.one_of(st.none(), st.integers()), 1: st.one_of(st.none(), st.text(max_size=3), st.booleans())}
    good[field] = draw(wrong.get(field, st.one_of(st.none(), st.integers(2, 5), st.text(max_size=3))))
    if field == 4:
        good[4] = draw(st.one_of(st.none(), st.lists(_scalars, max_size=2), st.integers()))
    return tuple(good)


def examples_for(kind: str) -> int:
    return 12 if kind in LOCAL_KINDS else 3  # worker round trips cost more


@pytest.mark.parametrize("on_error", ["raise", "reset"])
def test_a_bad_result_is_a_typed_failure_of_that_env_only(kind: str, on_error: str) -> None:
    from gem_core.errors import EnvResultError

    with build(kind, n=3, episode_length=4, on_error=on_error) as vec:

        @settings(max_examples=examples_for(kind), deadline=None, derandomize=True)
        @given(bad=bad_step_results(), culprit=st.integers(0, 2), seed=st.integers(0, 2**32))
        def check(bad: Any, culprit: int, seed: int) -> None:
            vec.reset(seed=seed)
            actions = ["a"] * 3
            actions[culprit] = f"return:{bad!r}"
            if on_error == "raise":
                with pytest.raises(VectorEnvError) as caught:
                    vec.step(actions)
                assert list(caught.value.failures) == [culprit]
                error = caught.value.failures[culprit]
                results = caught.value.results
            else:
                results = vec.step(actions)
                error = None
            obs, rewards, term, trunc, infos = results  # type: ignore[misc]
            for i in range(3):
                if i != culprit:  # the others were stepped, and their results delivered
                    assert obs[i].endswith("t 1 a") and rewards[i] == 1.0 and "env_error" not in infos[i]
            report = infos[culprit]["env_error"]
            assert report["type"] == "EnvResultError" and report["phase"] == "step"
            assert report["seed"] == episode_seed(seed, culprit, 0)
            assert f"env {culprit} (" in report["message"] and f"seed {report['seed']}" in report["message"]
            if on_error == "raise":
                assert isinstance(error, EnvResultError)
                assert vec.needs_reset == [i == culprit for i in range(3)]
            else:  # recovered: a new episode with the env's next seed
                assert obs[culprit].startswith("start ") and trunc[culprit] and not term[culprit]
                assert infos[culprit]["seed"] == episode_seed(seed, culprit, 1)
                assert not any(vec.needs_reset)

        check()
