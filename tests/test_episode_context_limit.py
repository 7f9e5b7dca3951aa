"""``EpisodeLimits.max_context_tokens``: a budget on the whole context (OpenRLHF's ``max_len``)."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("transformers", reason="the test extra installs transformers")

from gem_core.conformance import CASES, scripted_generation
from gem_core.episode import EpisodeEngine, EpisodeLimits, EpisodeSession, Generation, TurnRequest
from gem_core.errors import TrajectoryError

CASE = CASES[0]  # bisection on NumberGuess, chatml


def play(limits: EpisodeLimits, seed: int) -> tuple[EpisodeSession, list[TurnRequest]]:
    tokenizer = CASE.tokenizer()
    engine = EpisodeEngine(tokenizer, limits)
    requests: list[TurnRequest] = []

    async def generate(request: TurnRequest) -> Generation:
        requests.append(request)
        return scripted_generation(CASE, tokenizer, request.prompt_ids or [], request.max_tokens)

    session = asyncio.run(engine.play(CASE.make_env(), generate, env_id=CASE.env_id, seed=seed))
    return session, requests


@pytest.mark.parametrize("budget", [8, 20, 33, 60, 100, 400], ids=lambda b: f"budget={b}")
@pytest.mark.parametrize("seed", [0, 3], ids=lambda s: f"seed={s}")
def test_context_budget_equals_the_episode_budget_shifted_by_the_prompt(budget: int, seed: int) -> None:
    by_episode, _ = play(EpisodeLimits(max_turn_tokens=24, max_episode_tokens=budget), seed)
    prompt_length = by_episode.prompt_length
    by_context, requests = play(EpisodeLimits(max_turn_tokens=24, max_context_tokens=prompt_length + budget), seed)
    assert by_context.context == by_episode.context
    assert [t.to_dict() for t in by_context.turns] == [t.to_dict() for t in by_episode.turns]
    assert by_context.end_reason == by_episode.end_reason
    assert by_context.context is not None and len(by_context.context) <= prompt_length + budget
    assert all(r.max_tokens is not None and r.max_tokens >= 1 for r in requests)


def test_the_tighter_of_both_budgets_wins() -> None:
    loose, _ = play(EpisodeLimits(max_turn_tokens=24, max_episode_tokens=40), 0)
    both, _ = play(EpisodeLimits(max_turn_tokens=24, max_episode_tokens=40, max_context_tokens=10_000), 0)
    assert both.context == loose.context


def test_a_first_prompt_that_fills_the_context_is_a_clear_error() -> None:
    with pytest.raises(TrajectoryError, match=r"first prompt has \d+ tokens.*max_context_tokens=5"):
        play(EpisodeLimits(max_context_tokens=5), 0)
