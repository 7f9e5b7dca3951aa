"""The Ray backend's single-env handle (:class:`RayEnv`) and the episode runner on it.

The vector backend itself runs the shared suite in ``test_vector.py`` (kind ``ray``).
"""

from __future__ import annotations

import asyncio
import re
import sys
from typing import Any

import pytest
from gem_vector_testenvs import actor_is_dead
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.errors import ConfigError, EnvWorkerCrashed
from gem_core.runner import EpisodeRunner


async def guess_by_turn(messages: list[dict[str, Any]]) -> str:
    """Guesses 3, 6, 9, ...: enough to play NumberGuess to its end, win or lose."""
    await asyncio.sleep(0)
    return str(3 * sum(m["role"] == "user" for m in messages))


def play(env: Any, n: int) -> list[tuple[Any, ...]]:
    async def main() -> list[tuple[Any, ...]]:
        # keep_pool_full=False: exactly episodes 0..n-1, whichever finish first
        async with EpisodeRunner(env, policy=guess_by_turn, max_in_flight=2, seed=5, keep_pool_full=False) as runner:
            episodes = await runner.collect(n)
        return sorted(
            (e.metadata["index"], e.seed, e.env_id, [(t.observation, t.action, t.reward) for t in e.turns])
            for e in episodes
        )

    return asyncio.run(main())


@pytest.mark.usefixtures("ray_instance")
def test_runner_on_ray_plays_the_same_episodes_as_locally() -> None:
    from gem_core.vector.ray import ray_env_factory

    on_ray = play(ray_env_factory("core:NumberGuess-v0", num_cpus=0.5), 4)
    assert on_ray == play("core:NumberGuess-v0", 4)
    assert all(env_id == "core:NumberGuess-v0" for _, _, env_id, _ in on_ray)


def test_ray_env_recovers_from_a_dead_actor(ray_instance: Any) -> None:
    from gem_core.vector.ray import ray_env_factory

    async def main() -> None:
        env = ray_env_factory("core:NumberGuess-v0", num_cpus=0.5)()
        first, _ = await env.reset(seed=1)
        ray_instance.kill(env.actor)
        assert actor_is_dead(env.actor)
        with pytest.raises(EnvWorkerCrashed, match="reset\\(\\) starts a new one"):
            await env.step("8")
        with pytest.raises(EnvWorkerCrashed):
            await env.step("8")
        assert (await env.reset(seed=1))[0] == first  # a new actor, the same episode
        _, reward, *_ = await env.step("8")
        assert isinstance(reward, float)
        await env.close()
        await env.close()

    asyncio.run(main())


@pytest.mark.usefixtures("ray_instance")
def test_ray_env_build_error_surfaces_as_itself() -> None:
    from gem_vector_testenvs import make_broken_env

    from gem_core.vector.ray import RayEnv

    async def main() -> None:
        env = RayEnv(make_broken_env, num_cpus=0.5)
        with pytest.raises(ConfigError, match="broken_env: bad config"):
            await env.reset(seed=0)
        await env.close()

    asyncio.run(main())


def test_unknown_id_fails_before_any_actor_starts() -> None:
    from gem_core.errors import EnvNotFound
    from gem_core.vector.ray import ray_env_factory

    with pytest.raises(EnvNotFound):
        ray_env_factory("core:Nope-v0")


def test_missing_ray_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from gem_core.vector import ray as ray_backend

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=re.escape("pip install 'gem-core[ray]'")):
        ray_backend.RayVectorEnv([lambda: None])  # type: ignore[list-item, return-value]


# ---------------------------------------------------------------------- placement on the cluster at hand


def test_make_vec_fits_the_cpus_ray_started_with(ray_instance: Any) -> None:
    # each env's spec asks for 1 CPU (the default); Ray started by default has this machine's CPUs
    from gem_vector_testenvs import build

    from gem_core.registry import EnvSpec, Registry
    from gem_core.vector import make_vec

    registry = Registry()
    registry.add(EnvSpec(id="test:Count-v0", entry_point="gem_vector_testenvs:CountEnv", kwargs={"episode_length": 2}))
    cpus = ray_instance.cluster_resources()["CPU"]
    with make_vec("test:Count-v0", 4, backend="ray", registry=registry) as vec:
        assert 1 <= len(vec.actors) <= max(1, cpus)  # type: ignore[attr-defined]
        assert sorted(i for h in vec.actors for i in h.indices) == [0, 1, 2, 3]  # type: ignore[attr-defined]
        obs, _ = vec.reset(seed=1)
        with build("sync", n=4, episode_length=2) as ref:
            assert ref.reset(seed=1)[0] == obs
            assert ref.step(["a"] * 4)[0] == vec.step(["a"] * 4)[0]


def test_placement_that_cannot_happen_names_the_resources(ray_instance: Any) -> None:
    from gem_vector_testenvs import make_count_env

    from gem_core.errors import PlacementError
    from gem_core.vector.ray import RayVectorEnv

    free_before = ray_instance.available_resources().get("CPU", 0)
    with pytest.raises(PlacementError, match=r"needs 2 actors of 64 CPUs, 128 CPUs in all; the cluster has \d+ CPUs"):
        RayVectorEnv([make_count_env] * 2, num_cpus=64, envs_per_actor=1, placement_timeout=2)
    # the actors that waited were killed: their (never granted) CPUs are not held
    assert ray_instance.available_resources().get("CPU", 0) >= free_before - 1e-9


@settings(max_examples=50, deadline=None)
@given(
    cpus=st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0]), min_size=1, max_size=20),
    free=st.floats(0, 16),
    per_actor=st.one_of(st.none(), st.integers(1, 5)),
)
def test_pack_envs_places_every_env_once_within_the_free_cpus(
    cpus: list[float], free: float, per_actor: int | None
) -> None:
    from gem_core.vector.ray import pack_envs

    parts = pack_envs(cpus, free, per_actor)
    assert sorted(i for p in parts for i in p) == list(range(len(cpus)))
    assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1
    if per_actor is not None:
        assert len(parts) == -(-len(cpus) // per_actor)
    elif max(cpus) > 0:  # as many actors as fit (at least one, to wait for)
        assert len(parts) == max(1, min(len(cpus), int(free / max(cpus) + 1e-9)))


# ---------------------------------------------------------------------- faults: no late reply is ever read


def test_a_cancelled_call_discards_the_actor_and_its_late_reply_is_never_read(ray_instance: Any) -> None:
    from gem_vector_testenvs import make_count_env

    from gem_core.vector.ray import RayEnv

    async def main() -> None:
        env = RayEnv(make_count_env, num_cpus=0.5)
        first, _ = await env.reset(seed=4)
        old = env.actor
        with pytest.raises(asyncio.TimeoutError):  # the caller gives up; the actor still sleeps 3 s
            await asyncio.wait_for(env.step("sleep"), 0.2)
        with pytest.raises(EnvWorkerCrashed, match=r"phase step\): the Ray actor was discarded \(a step call was"):
            await env.step("a")
        assert actor_is_dead(old)
        assert (await env.reset(seed=4))[0] == first  # a new actor, the same episode
        obs, *_ = await env.step("b")
        assert obs.endswith("t 1 b")  # this call's reply, never the abandoned "sleep"'s
        await env.close()

    asyncio.run(main())


def test_the_runner_on_ray_ends_a_hanging_episode_with_a_typed_error(ray_instance: Any) -> None:
    import functools

    from gem_vector_testenvs import make_faulty_count_env

    from gem_core.errors import EnvStepTimeout
    from gem_core.seed_streams import episode_seed
    from gem_core.vector.ray import RayEnv

    async def reply(messages: list[dict[str, Any]]) -> str:
        await asyncio.sleep(0)
        return "a"

    hung = episode_seed(5, 0, 1)  # the runner's second episode hangs at its first step
    factory = functools.partial(make_faulty_count_env, "hang", 1, (hung,), 2, 120.0)

    async def main() -> list[Any]:
        envs = functools.partial(RayEnv, factory, num_cpus=0.5, step_timeout=10)
        async with EpisodeRunner(
            envs, policy=reply, max_in_flight=2, seed=5, keep_pool_full=False, on_env_error="end"
        ) as runner:
            return sorted(await runner.collect(3), key=lambda e: e.metadata["index"])

    episodes = asyncio.run(main())
    assert [e.metadata["end_reason"] for e in episodes] == ["env", "error", "env"]
    failed = episodes[1].metadata
    assert (failed["error_type"], failed["error_phase"]) == (EnvStepTimeout.__name__, "step")
    assert f"seed {hung}, phase step): no reply within step_timeout=10s" in failed["error"]
    assert [len(e.turns) for e in episodes] == [2, 0, 2]
    assert all([t.reward for t in e.turns] == [1.0, 2.0] for e in (episodes[0], episodes[2]))  # counted, fresh
