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

from gem_core.errors import ConfigError, EnvWorkerCrashed
from gem_core.runner import EpisodeRunner

pytestmark = pytest.mark.usefixtures("ray_instance")


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
