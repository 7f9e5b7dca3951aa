"""The fault model of every backend: what an env returns or does never corrupts the other envs' results.

See docs/wrappers-vector.md, "Faults". A fault of one env gives a typed error naming the env
(index, id, seed, phase), ``on_error`` applies to it, and every other env's result of that
call is delivered and correct; a worker or actor whose state is unknown is replaced.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from gem_vector_testenvs import alive_pid, build, make_faulty_count_env, wait_until
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from gem_core.errors import EnvResultError, VectorEnvError
from gem_core.vector import episode_seed

HOSTED_KINDS = ["process", "async-process", "ray"]


@pytest.fixture(autouse=True)
def _ray_when_needed(request: pytest.FixtureRequest) -> None:
    params = getattr(request.node, "callspec", None)
    if params is not None and "ray" in params.params.values():
        request.getfixturevalue("ray_instance")


def faulty(fault: str, seed: int, env: int, fail_at: int = 2, **kwargs: Any) -> Any:
    """A factory of envs that misbehave at step ``fail_at`` of env ``env``'s first episode of a run seeded ``seed``."""
    return functools.partial(make_faulty_count_env, fault, fail_at, (episode_seed(seed, env, 0),), **kwargs)


@pytest.mark.parametrize("kind", ["process"])  # the reproducer; the matrix covers every backend
@pytest.mark.parametrize("on_error", ["raise", "reset"])
@pytest.mark.parametrize("fault", ["unpicklable", "unloadable"])
def test_a_result_that_cannot_travel_fails_its_env_only_and_nothing_goes_stale(
    kind: str, on_error: str, fault: str
) -> None:
    # 4 envs on 2 workers: env 1's result cannot reach the parent; env 0 shares its worker
    with build(kind, n=4, factory=faulty(fault, 5, 1), on_error=on_error) as vec:
        vec.reset(seed=5)
        vec.step(["a"] * 4)
        if on_error == "raise":
            with pytest.raises(VectorEnvError) as caught:
                vec.step(["b"] * 4)
            assert list(caught.value.failures) == [1]
            error = caught.value.failures[1]
            assert isinstance(error, EnvResultError) and "env 1 (" in str(error)
            assert ("does not pickle" if fault == "unpicklable" else "does not unpickle") in str(error)
            obs = caught.value.results[0]  # type: ignore[index]
            vec.reset(indices=[1])
        else:
            obs, _, _, trunc, infos = vec.step(["b"] * 4)
            assert infos[1]["env_error"]["type"] == "EnvResultError" and trunc[1]
            assert obs[1].startswith("start ")
        assert [obs[i] for i in (0, 2, 3)] == [o for o in obs if o.endswith("t 2 b")]
        for k in range(3):  # later steps: fresh results, never a previous step's
            obs, *_ = vec.step([f"c{k}"] * 4)
            assert all(o.endswith(f" c{k}") or o.startswith("start ") for o in obs), obs
            assert [o.split()[3] for o in obs if not o.startswith("start ")]  # counted, not repeated


@pytest.mark.parametrize("kind", HOSTED_KINDS)
def test_close_kills_a_child_that_left_its_process_group(kind: str) -> None:
    with build(kind, n=2, factory=faulty("setsid_child", 3, 0, fail_at=1)) as vec:
        vec.reset(seed=3)
        _, _, _, _, infos = vec.step(["a", "a"])
        child = infos[0]["child_pid"]
        assert alive_pid(child)
    assert wait_until(lambda: not alive_pid(child)), f"the setsid child {child} outlived close()"
    assert Path("/proc").exists()


# ---------------------------------------------------------------------- the fault matrix
# fault x backend x on_error x autoreset mode: every delivered result is checked against a sync
# replay with the same seeds in which the envs the fault takes down raise a plain exception at
# that step instead (the envs it leaves alone replay exactly, fault-free).

IN_BAND = ["raise", "none", "wrong_arity", "wrong_type"]  # a bad return or exception: only that env
TRAVEL = ["unpicklable", "unloadable"]  # only where results cross a process boundary
HOST_KILLERS = ["exit", "segfault", "hang"]  # take their worker or actor, so all its envs
LOCAL_FAULTS = [*IN_BAND, *TRAVEL, "hang"]
HOSTED_FAULTS = [*IN_BAND, *TRAVEL, *HOST_KILLERS, "setsid_child"]
# async process envs share the process backend's code (HostedGroup, WorkerHost): a few faults suffice there
MATRIX = [
    *[(kind, fault) for kind in ("sync", "async-thread") for fault in LOCAL_FAULTS],
    *[(kind, fault) for kind in ("process", "ray") for fault in HOSTED_FAULTS],
    *[("async-process", fault) for fault in ("unloadable", "segfault", "hang")],
]
STEP_TIMEOUT = {"sync": 1.0, "async-thread": 1.0, "process": 5.0, "async-process": 5.0, "ray": 10.0}
EXPECTED = {
    "raise": "RuntimeError",
    "exit": "EnvWorkerCrashed",
    "segfault": "EnvWorkerCrashed",
    "hang": "EnvStepTimeout",
}
N, LENGTH, STEPS = 4, 3, 5


def host_mates(vec: Any, index: int) -> list[int]:
    hosts = vec.actors if hasattr(vec, "actors") else vec.workers
    return next(h.indices for h in hosts if index in h.indices)


def taken_down(kind: str, fault: str, vec: Any, culprit: int) -> list[int]:
    """The envs whose step fails when ``culprit`` misbehaves."""
    if fault in IN_BAND or (fault in TRAVEL and kind in HOSTED_KINDS) or (fault == "hang" and kind not in HOSTED_KINDS):
        return [culprit]
    if fault in HOST_KILLERS:
        return host_mates(vec, culprit)
    return []


def comparable(results: Any, i: int) -> tuple[Any, ...]:
    """Env ``i``'s entry, without what differs by design (the error's details, the fault's payload)."""
    obs, rewards, term, trunc, infos = results
    drop = {"env_error", "payload", "child_pid"}
    info = {k: v for k, v in infos[i].items() if k not in drop}
    if "final_info" in info:
        info["final_info"] = {k: v for k, v in info["final_info"].items() if k not in drop}
    return (obs[i], float(rewards[i]), bool(term[i]), bool(trunc[i]), info, "env_error" in infos[i])


def step_both(vec: Any, ref: Any, actions: list[str]) -> tuple[Any, Any, dict[int, BaseException]]:
    got: list[Any] = []
    for v in (vec, ref):
        try:
            got.append((v.step(actions), {}))
        except VectorEnvError as error:
            got.append((error.results, error.failures))
    (results, failures), (expected, expected_failures) = got
    assert sorted(failures) == sorted(expected_failures), (failures, expected_failures)
    return results, expected, failures


@pytest.mark.parametrize(("kind", "fault"), MATRIX, ids=[f"{k}-{f}" for k, f in MATRIX])
def test_fault_matrix(kind: str, fault: str) -> None:
    heavy = kind in HOSTED_KINDS

    # no shrinking: each example builds vector envs (seconds on the heavy backends)
    @settings(max_examples=1 if heavy else 3, deadline=None, derandomize=True, phases=[Phase.generate])
    @given(
        on_error=st.sampled_from(["raise", "reset"]),
        mode=st.sampled_from(["next_step", "same_step"]),
        culprit=st.integers(0, N - 1),
        fail_at=st.integers(1, LENGTH - 1),
        root=st.integers(0, 2**32),
    )
    def check(on_error: str, mode: str, culprit: int, fail_at: int, root: int) -> None:
        hang_s = 3.0 if kind == "async-thread" else 120.0  # an abandoned thread runs until then
        factory = faulty(fault, root, culprit, fail_at, episode_length=LENGTH, hang_s=hang_s)
        options = {"on_error": on_error, "autoreset_mode": mode, "step_timeout": STEP_TIMEOUT[kind]}
        with build(kind, n=N, factory=factory, **options) as vec:
            down = taken_down(kind, fault, vec, culprit)
            seeds = tuple(episode_seed(root, i, 0) for i in down)
            reference = functools.partial(make_faulty_count_env, "raise", fail_at, seeds, episode_length=LENGTH)
            with build("sync", n=N, factory=reference, on_error=on_error, autoreset_mode=mode) as ref:
                assert vec.reset(seed=root) == ref.reset(seed=root)
                children: list[int] = []
                for t in range(STEPS):
                    results, expected, failures = step_both(vec, ref, [f"a{t}"] * N)
                    for i in range(N):
                        assert comparable(results, i) == comparable(expected, i), (t, i)
                        report = results[4][i].get("env_error")
                        if report is not None:
                            assert report["index"] == i and report["phase"] in ("step", "recovery reset")
                            if i == culprit:
                                assert report["type"] == EXPECTED.get(fault, "EnvResultError"), report
                                assert report["seed"] is not None  # the env's own exception keeps its message
                                assert fault == "raise" or f"env {culprit} (" in report["message"]
                        children += [info["child_pid"] for info in results[4] if "child_pid" in info]
                    if failures:  # on_error="raise": the failed envs are reset, as a user would
                        assert vec.reset(indices=sorted(failures)) == ref.reset(indices=sorted(failures))
        assert all(wait_until(lambda p=pid: not alive_pid(p)) for pid in children), "a child outlived close()"
        assert fault != "setsid_child" or children

    check()


@pytest.mark.parametrize("on_error", ["raise", "reset"])
def test_a_hanging_async_env_is_cancelled_at_step_timeout(on_error: str) -> None:
    from gem_core.errors import EnvStepTimeout

    with build("async-native", n=2, episode_length=5, on_error=on_error, step_timeout=0.5) as vec:
        vec.reset(seed=1)
        if on_error == "raise":
            with pytest.raises(VectorEnvError) as caught:
                vec.step(["asleep", "a"])
            assert isinstance(caught.value.failures[0], EnvStepTimeout) and list(caught.value.failures) == [0]
            assert "env 0 (" in str(caught.value.failures[0])
            results: Any = caught.value.results
        else:
            results = vec.step(["asleep", "a"])
            assert results[0][0].startswith("start ") and results[3][0]
            assert results[4][0]["env_error"]["type"] == "EnvStepTimeout"
        assert results[0][1].endswith("t 1 a")


@pytest.mark.parametrize("value", [0, -1.0, "5", True])
def test_step_timeout_must_be_positive_seconds(value: Any) -> None:
    from gem_core.errors import ConfigError

    with pytest.raises(ConfigError, match="step_timeout must be a positive number"):
        build("sync", n=1, step_timeout=value)


def test_a_worker_whose_replies_cannot_be_read_is_replaced_never_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    from gem_core.errors import EnvWorkerCrashed
    from gem_core.vector import hosted

    real_decode = hosted.decode

    def torn(frame: bytes) -> Any:  # the per-env replies of a split arrive unreadable
        value = real_decode(frame)
        if isinstance(value, list) and value and isinstance(value[0], bytes):
            raise EOFError("torn reply")
        return value

    with build("process", n=4, factory=faulty("unloadable", 2, 1)) as vec:
        vec.reset(seed=2)
        vec.step(["a"] * 4)
        mates = host_mates(vec, 1)
        before = {tuple(w.indices): w.process.pid for w in vec.workers}  # type: ignore[attr-defined]
        monkeypatch.setattr(hosted, "decode", torn)
        with pytest.raises(VectorEnvError) as caught:
            vec.step(["b"] * 4)
        monkeypatch.undo()
        assert sorted(caught.value.failures) == mates
        assert all(isinstance(e, EnvWorkerCrashed) for e in caught.value.failures.values())
        after = {tuple(w.indices): w.process.pid for w in vec.workers}  # type: ignore[attr-defined]
        assert after[tuple(mates)] != before[tuple(mates)]  # replaced
        obs = caught.value.results[0]  # type: ignore[index]
        assert all(obs[i].endswith("t 2 b") for i in range(4) if i not in mates)
        vec.reset(indices=mates)
        obs, *_ = vec.step(["c"] * 4)
        assert [o.split()[3] for o in obs] == ["1" if i in mates else "3" for i in range(4)]


@pytest.mark.parametrize("backend", ["sync", "process"])
def test_errors_name_the_registered_env_id(backend: str) -> None:
    from gem_core.registry import EnvSpec, Registry
    from gem_core.vector import make_vec

    registry = Registry()
    registry.add(
        EnvSpec(id="test:Faulty-v0", entry_point="gem_core.testing:faulty_number_guess", kwargs={"fault": "none"})
    )
    with make_vec("test:Faulty-v0", 2, backend=backend, registry=registry, max_processes=1) as vec:  # type: ignore[arg-type]
        vec.reset(seed=0)
        with pytest.raises(VectorEnvError, match=r"env 0 \(test:Faulty-v0, seed \d+, phase step\)") as caught:
            vec.step(["1", "2"])
        assert isinstance(caught.value.failures[1], EnvResultError)
        assert "step() must return a 5-tuple" in str(caught.value.failures[1])


# ---------------------------------------------------------------------- RayEnv, the runner's single-env handle
# The same faults on one env in an actor (gem_core.vector.ray.RayEnv): each call's outcome is the
# local replay's, or a typed error where the replay raises; no call ever gets another call's reply.

RAY_ENV_ERRORS = {"raise": "RuntimeError", "exit": "EnvWorkerCrashed", "segfault": "EnvWorkerCrashed"}
RAY_ENV_ERRORS["hang"] = "EnvStepTimeout"


def outcome(loop: Any, call: Any, children: list[int]) -> tuple[Any, str | None, str]:
    """``(result, None, "")`` without the fault's payload, or ``(None, error type, message)``, of an env call."""
    try:
        result = loop.run_until_complete(call)
    except Exception as error:
        return None, type(error).__name__, str(error)
    *head, info = result
    children += [info["child_pid"]] if "child_pid" in info else []
    return (*head, {k: v for k, v in info.items() if k not in ("payload", "child_pid")}), None, ""


@pytest.mark.usefixtures("ray_instance")
@pytest.mark.parametrize("phase", ["reset", "step"])
@pytest.mark.parametrize("fault", HOSTED_FAULTS)
def test_ray_env_fault_matrix(fault: str, phase: str) -> None:
    import asyncio

    from gem_core.core import to_async
    from gem_core.vector.ray import RayEnv

    @settings(max_examples=1, deadline=None, derandomize=True, phases=[Phase.generate])
    @given(fail_at=st.just(0) if phase == "reset" else st.integers(1, LENGTH - 1), seed=st.integers(0, 2**32 - 2))
    def check(fail_at: int, seed: int) -> None:
        faulty_env = functools.partial(make_faulty_count_env, fault, fail_at, (seed,), LENGTH, 120.0)
        env = RayEnv(faulty_env, num_cpus=0.5, step_timeout=STEP_TIMEOUT["ray"])
        # the replay raises where the fault strikes; a setsid child is no fault of the results
        down = () if fault == "setsid_child" else (seed,)
        ref = to_async(make_faulty_count_env("raise", fail_at, down, LENGTH), in_thread=False)
        loop = asyncio.new_event_loop()
        children: list[int] = []
        try:
            for episode in (seed, seed + 1):  # the faulty episode, then a whole one
                calls = [("reset", episode)] + [("step", f"a{t}") for t in range(LENGTH)]
                for op, arg in calls:
                    got, expected = (
                        outcome(loop, e.reset(seed=arg) if op == "reset" else e.step(arg), children)  # type: ignore[arg-type]
                        for e in (env, ref)
                    )
                    error = None if expected[1] is None else RAY_ENV_ERRORS.get(fault, "EnvResultError")
                    assert got[:2] == (expected[0], error), (episode, op, arg, got, expected)
                    if error is None:
                        continue
                    assert fault == "raise" or f"seed {episode}, phase {op})" in got[2], got[2]
                    if fault in ("exit", "segfault", "hang"):  # the actor was discarded: no step until reset
                        again = outcome(loop, env.step("again"), children)
                        assert again[1] == "EnvWorkerCrashed" and "reset() starts a new one" in again[2]
                    break
        finally:
            loop.run_until_complete(env.close())
            loop.run_until_complete(ref.close())
            loop.close()
        assert all(wait_until(lambda p=pid: not alive_pid(p)) for pid in children), "a child outlived close()"
        assert fault != "setsid_child" or children

    check()
