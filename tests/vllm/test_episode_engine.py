"""The episode engine driven by a real vLLM: ``play_batch`` on ``LLM.generate``, ``play`` on ``AsyncLLMEngine``.

Token exact: every turn records the ids vLLM sampled (stop token included) and their
logprobs, the prompt of each turn is what vLLM was given, and the context only grows.
A random model writes no number, and the game ends at the first malformed answer: in the
even episodes vLLM may only sample digits and the stop token (``allowed_token_ids``, a bias
on the stop token), so they guess for several turns, each ended by the model; the odd
episodes sample freely and are cut at the token limit.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from gem_core.api import make
from gem_core.episode import EpisodeEngine, EpisodeJob, EpisodeSession, Generation, TurnRequest

pytest.importorskip("gem_games", reason="the vllm tox env installs gem-games")

GAME = "game:GuessTheNumber-v0-easy"
#: A bare number is a move (out of range: a lost turn, not the end), so digit-only replies play on.
GAME_KWARGS = {"answer_format": "raw"}
SEEDS = [0, 1, 2, 3]


def _engine(tokenizer: Any) -> EpisodeEngine:
    return EpisodeEngine(tokenizer, max_turns=4, max_turn_tokens=6)


def _params(tokenizer: Any, request: TurnRequest, seed: int) -> Any:
    from vllm import SamplingParams

    eos = int(tokenizer.eos_token_id)
    guesses = request.episode_index % 2 == 0
    return SamplingParams(
        temperature=1.0,
        max_tokens=request.max_tokens,
        seed=seed * 100 + request.turn,
        logprobs=2,
        allowed_token_ids=[*tokenizer.convert_tokens_to_ids(list("123456789")), eos] if guesses else None,
        logit_bias={eos: 2.0} if guesses else None,
    )


def _assert_token_exact(session: EpisodeSession, sent: list[tuple[list[int], Any]]) -> None:
    """Each turn holds what vLLM was sent and returned, in order."""
    assert len(session.turns) == len(sent), session.end_reason
    for turn, (prompt, completion) in zip(session.turns, sent, strict=True):
        assert list(turn.prompt_token_ids or []) == prompt
        assert turn.action_token_ids == list(completion.token_ids)
        sampled = [step[token].logprob for step, token in zip(completion.logprobs, completion.token_ids, strict=True)]
        assert turn.action_logprobs == sampled
        assert turn.stop_reason == completion.finish_reason
    last_prompt, last = sent[-1]
    assert session.context is not None and session.context[: len(last_prompt) + len(last.token_ids)] == [
        *last_prompt,
        *last.token_ids,
    ]


def _assert_mixed_reasons(sessions: list[EpisodeSession]) -> None:
    reasons = {t.stop_reason for s in sessions for t in s.turns}
    assert reasons == {"stop", "length"}, reasons
    assert max(len(s.turns) for s in sessions) > 1  # multi-turn


def test_play_batch_on_llm_generate_is_token_exact(llm: Any, generation_of: Any) -> None:
    from vllm import TokensPrompt

    tokenizer = llm.get_tokenizer()
    engine = _engine(tokenizer)
    sent: dict[int, list[tuple[list[int], Any]]] = {i: [] for i in range(len(SEEDS))}
    calls: list[int] = []

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        calls.append(len(requests))
        prompts = [TokensPrompt(prompt_token_ids=list(r.prompt_ids or [])) for r in requests]
        params = [_params(tokenizer, r, SEEDS[r.episode_index]) for r in requests]
        outputs = llm.generate(prompts, params, use_tqdm=False)
        for request, output in zip(requests, outputs, strict=True):
            assert list(output.prompt_token_ids) == request.prompt_ids
            sent[request.episode_index].append((list(request.prompt_ids or []), output.outputs[0]))
        return [generation_of(o.outputs[0]) for o in outputs]

    jobs = [EpisodeJob(env=make(GAME, **GAME_KWARGS), env_id=GAME, seed=seed) for seed in SEEDS]
    sessions = engine.play_batch(jobs, generate)
    assert calls[0] == len(SEEDS) and calls == sorted(calls, reverse=True)  # one batch per turn, episodes drop out
    for index, session in enumerate(sessions):
        _assert_token_exact(session, sent[index])
    _assert_mixed_reasons(sessions)


def test_play_on_async_engine_is_token_exact(async_engine: Any, generation_of: Any) -> None:
    from vllm import TokensPrompt

    engine_, runner = async_engine
    tokenizer = engine_.get_tokenizer()
    engine = _engine(tokenizer)

    async def play_all() -> tuple[list[EpisodeSession], dict[int, list[tuple[list[int], Any]]]]:
        sent: dict[int, list[tuple[list[int], Any]]] = {i: [] for i in range(len(SEEDS))}

        def generate_for(index: int) -> Any:
            async def generate(request: TurnRequest) -> Generation:
                final = None
                prompt = TokensPrompt(prompt_token_ids=list(request.prompt_ids or []))
                params = _params(tokenizer, request, SEEDS[index])
                async for output in engine_.generate(prompt, params, request_id=uuid.uuid4().hex):
                    final = output
                assert final is not None and final.finished
                sent[index].append((list(request.prompt_ids or []), final.outputs[0]))
                return generation_of(final.outputs[0])

            return generate

        sessions = await asyncio.gather(
            *(
                engine.play(make(GAME, **GAME_KWARGS), generate_for(i), env_id=GAME, seed=seed, index=i)
                for i, seed in enumerate(SEEDS)
            )
        )
        return list(sessions), sent

    sessions, sent = runner.run(play_all())
    for index, session in enumerate(sessions):
        _assert_token_exact(session, sent[index])
    _assert_mixed_reasons(sessions)
