"""The continuous scheduler on envs in Ray actors (:class:`~gem_core.vector.ray.RayEnv`): the lockstep episodes."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest

pytest.importorskip("transformers", reason="the test extra installs transformers")

from gem_core.api import make
from gem_core.conformance import CASES, record_from_episode, reference_episodes, scripted_generation
from gem_core.episode import EpisodeEngine, EpisodeJob, Generation, TurnRequest
from gem_core.scheduling import RolloutScheduler


@pytest.mark.usefixtures("ray_instance")
def test_ray_envs_step_concurrently_and_play_the_lockstep_episodes() -> None:
    from gem_core.vector.ray import RayEnv

    case = next(c for c in CASES if c.name == "bisect")
    tokenizer = case.tokenizer()

    async def generate(request: TurnRequest) -> Generation:
        await asyncio.sleep(0.001)
        return scripted_generation(case, tokenizer, request.prompt_ids or [], request.max_tokens)

    async def run() -> list[Any]:
        envs = [RayEnv(functools.partial(make, case.env_id), num_cpus=0.5) for _ in case.seeds]
        scheduler = RolloutScheduler(EpisodeEngine(tokenizer, case.limits), generate=generate, max_in_flight=4)
        try:
            return await scheduler.play_all(
                EpisodeJob(env=env, env_id=case.env_id, seed=seed) for env, seed in zip(envs, case.seeds, strict=True)
            )
        finally:
            scheduler.close()
            await asyncio.gather(*(env.close() for env in envs))

    sessions = asyncio.run(run())
    assert [s.end_reason for s in sessions] == ["env"] * len(case.seeds)
    assert [record_from_episode(s.episode()) for s in sessions] == [
        record_from_episode(ep) for ep in reference_episodes(case)
    ]
