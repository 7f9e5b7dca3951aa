"""The conformance suite through every core driver: the runner (per request and batched), play and play_batch."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("transformers", reason="the test extra installs transformers")

from gem_core.conformance import (
    CASES,
    ConformanceCase,
    ConformanceRecord,
    assert_conformant,
    record_from_episode,
    reference_records,
    scripted_generation,
)
from gem_core.episode import EpisodeEngine, Generation, TurnRequest
from gem_core.rl.advantages import rebn
from gem_core.rl.returns import discounted_returns
from gem_core.rl.types import Episode
from gem_core.runner import EpisodeRunner


def with_rebn(case: ConformanceCase, episodes: list[Episode]) -> list[ConformanceRecord]:
    import numpy as np

    returns = [discounted_returns(ep, case.gamma) for ep in episodes]
    flat = rebn(np.concatenate(returns))
    split = np.split(flat, np.cumsum([len(r) for r in returns])[:-1])
    return [record_from_episode(ep, adv.tolist()) for ep, adv in zip(episodes, split, strict=True)]


def runner_records(case: ConformanceCase, batched: bool) -> list[ConformanceRecord]:
    tokenizer = case.tokenizer()

    async def token_policy(prompt_ids: list[int]) -> Generation:
        # the runner gives a bare token policy no limit; the scripted server applies the case's own
        return scripted_generation(case, tokenizer, prompt_ids, case.limits.max_turn_tokens)

    async def generate(requests: list[TurnRequest]) -> list[Generation]:
        return [scripted_generation(case, tokenizer, r.prompt_ids or [], r.max_tokens) for r in requests]

    async def run() -> list[Episode]:
        policy: dict[str, Any] = {"generate": generate} if batched else {"token_policy": token_policy}
        async with EpisodeRunner(
            case.make_env,
            tokenizer=tokenizer,
            max_turns=case.limits.max_turns,
            max_turn_tokens=case.limits.max_turn_tokens,
            max_episode_tokens=case.limits.max_episode_tokens,
            start_seeds=case.seeds,
            max_in_flight=3,
            keep_pool_full=False,
            **policy,
        ) as runner:
            episodes = await runner.collect(len(case.seeds))
        return sorted(episodes, key=lambda e: e.metadata["index"])

    return with_rebn(case, asyncio.run(run()))


def play_records(case: ConformanceCase) -> list[ConformanceRecord]:
    tokenizer = case.tokenizer()
    engine = EpisodeEngine(tokenizer, case.limits)

    async def generate(request: TurnRequest) -> Generation:
        await asyncio.sleep(0)
        return scripted_generation(case, tokenizer, request.prompt_ids or [], request.max_tokens)

    async def run() -> list[Episode]:
        sessions = await asyncio.gather(
            *(engine.play(case.make_env(), generate, env_id=case.env_id, seed=seed) for seed in case.seeds)
        )
        return [s.episode() for s in sessions]

    return with_rebn(case, asyncio.run(run()))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("driver", ["runner-per-request", "runner-batched", "play"])
def test_every_core_driver_conforms(case: ConformanceCase, driver: str) -> None:
    records = play_records(case) if driver == "play" else runner_records(case, batched=driver == "runner-batched")
    assert_conformant(case, records)


def test_the_suite_catches_a_difference() -> None:
    case = CASES[0]
    records = reference_records(case)
    assert_conformant(case, records)
    records[1].rewards[-1] = 0.5
    with pytest.raises(AssertionError, match=r"\[bisect\] episode 1 .* rewards: first difference at \[0\]"):
        assert_conformant(case, records)
    records = reference_records(case)
    records[0].loss_mask[-1] = 0
    with pytest.raises(AssertionError, match="loss_mask"):
        assert_conformant(case, records)
    records = reference_records(case)
    assert records[0].token_advantages is not None
    records[0].token_advantages[-1] += 0.01
    with pytest.raises(AssertionError, match="token_advantages"):
        assert_conformant(case, records)


def test_cases_cover_what_the_issue_names() -> None:
    episodes = {case.name: [r for r in reference_records(case)] for case in CASES}
    assert any("<\uff5cINVALID_ACTION\uff5c>" in r.actions for r in episodes["cut-generation"])
    assert max(len(r.actions) for r in episodes["16-turns"]) == 16
    assert all(r.truncated[-1] for r in episodes["16-turns"])
    assert all(r.actions[0] == "<echo>hello</echo>" for r in episodes["tool-env"])
