"""Partial rollouts on a real vLLM ``AsyncLLMEngine``: requests aborted for a weight update resume without loss.

The scheduler plays episodes continuously; twice a "trainer" updates the weights with an
``abort`` hook that makes every running request stop (``engine.abort``) and answer
``"abort"`` with what it sampled so far. Each aborted turn is resumed: vLLM is asked with
prompt = context + the ids already sampled (it reports that prompt back, so nothing was
decoded or re-encoded), and the turn's record holds the first part's ids and logprobs
unchanged, then the continuation's, with the versions that sampled them.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from gem_core.api import make
from gem_core.episode import EpisodeEngine, EpisodeJob, EpisodeSession, Generation, TurnRequest
from gem_core.scheduling import RolloutScheduler

pytest.importorskip("gem_games", reason="the vllm tox env installs gem-games")

GAME = "game:GuessTheNumber-v0-easy"
SEEDS = [0, 1, 2, 3]
TURN_TOKENS = 24


def test_aborted_requests_resume_under_new_weights_token_exact(async_engine: Any, generation_of: Any) -> None:
    from vllm import SamplingParams, TokensPrompt

    engine_, runner = async_engine
    tokenizer = engine_.get_tokenizer()
    engine = EpisodeEngine(tokenizer, max_turns=2, max_turn_tokens=TURN_TOKENS, max_resumes=4)
    stop = asyncio.Event()
    running: dict[str, int] = {}  # request id -> tokens streamed so far
    answered: dict[str, tuple[TurnRequest, list[int], Generation]] = {}

    async def generate(request: TurnRequest) -> Generation:
        request_id = uuid.uuid4().hex
        params = SamplingParams(
            temperature=1.0,
            seed=1000 * request.episode_index + 10 * request.turn + request.resume_from,
            max_tokens=request.max_tokens,
            min_tokens=max(0, 12 - request.resume_from),  # long enough to be cut mid-reply
            logprobs=1,
        )
        final: Any = None
        running[request_id] = 0
        try:
            async for output in engine_.generate(
                TokensPrompt(prompt_token_ids=list(request.prompt_ids or [])), params, request_id=request_id
            ):
                final = output
                running[request_id] = len(output.outputs[0].token_ids)
                if stop.is_set() and not output.finished:  # the trainer's abort reached this request
                    await engine_.abort(request_id)
                    break
        finally:
            running.pop(request_id)
        assert final is not None
        generation = generation_of(final.outputs[0])
        if not final.finished:
            generation.finish_reason = "abort"
        answered[request_id] = (request, list(final.prompt_token_ids), generation)
        return generation

    async def run() -> list[EpisodeSession]:
        scheduler = RolloutScheduler(engine, generate=generate, max_in_flight=len(SEEDS))

        async def abort() -> None:
            stop.set()

        async def trainer() -> None:
            for _ in range(2):
                while not any(n >= 2 for n in running.values()):  # a request that is mid-reply
                    await asyncio.sleep(0.005)
                await scheduler.update_policy(abort=abort)
                stop.clear()

        jobs = [EpisodeJob(env=make(GAME), env_id=GAME, seed=seed) for seed in SEEDS]
        updates = asyncio.ensure_future(trainer())
        try:
            return await scheduler.play_all(jobs)
        finally:
            updates.cancel()
            scheduler.close()

    sessions = runner.run(run())
    assert engine.policy_version >= 1
    requests = list(answered.values())
    resumed_turns = [t for s in sessions for t in s.turns if t.resumed_at]
    assert resumed_turns, "no turn was aborted mid-reply"
    for request, prompt_seen, _ in requests:
        assert prompt_seen == request.prompt_ids  # vLLM got the ids as they are, partial ids included
    for session in sessions:
        for number, turn in enumerate(session.turns):
            ids = turn.action_token_ids or []
            assert turn.policy_versions is not None and len(turn.policy_versions) == len(ids)
            if not turn.resumed_at:
                continue
            # the parts, in order: the aborted ones, then the one that finished
            parts = sorted(
                ((r.resume_from, g) for r, _, g in requests if (r.episode_index, r.turn) == (session.index, number)),
                key=lambda part: part[0],
            )
            joined = [t for _, g in parts for t in g.token_ids or []]
            assert joined == ids  # nothing lost, nothing added
            assert [lp for _, g in parts for lp in g.logprobs or []] == turn.action_logprobs
            assert [offset for offset, _ in parts[1:]] == turn.resumed_at
            assert turn.policy_versions == sorted(turn.policy_versions)
            assert turn.policy_versions[-1] > turn.policy_versions[0]  # the continuation ran under new weights
