"""The episode runner's records feed the layouts: its token-in/token-out prompts and the
chat-template deltas computed from its message history give the same sequence."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from gem_core.rl.advantages import rebn_advantages
from gem_core.rl.layouts import episodes_to_sequences, episodes_to_transitions
from gem_core.runner import run_episodes
from gem_core.testing import NumberGuessEnv
from gem_core.testing_tokenizers import build_chat_tokenizer

pytest.importorskip("transformers", reason="the test extra installs transformers")

GUESSES = ["My guess is 8.", "<think>\nhigher?\n</think>\n\n12", "5"]


def _runs(tokenizer: Any) -> tuple[list[Any], list[Any]]:
    def env() -> NumberGuessEnv:
        return NumberGuessEnv(low=1, high=16, max_turns=3)

    def action_for(turn: int) -> str:
        return GUESSES[turn % len(GUESSES)]

    async def policy(messages: list[dict[str, Any]]) -> str:
        return action_for(sum(m["role"] == "assistant" for m in messages))

    eos = tokenizer.eos_token_id

    async def token_policy(prompt_ids: list[int]) -> tuple[list[int], list[float]]:
        # <|im_start|> opens system, first user and the generation prompt, then 2 more per turn
        turn = (prompt_ids.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) - 3) // 2
        ids = [*tokenizer.encode(action_for(turn), add_special_tokens=False), eos]
        return ids, [-0.25] * len(ids)

    kwargs: dict[str, Any] = {"seed": 3, "system_prompt": "You are playing a game.", "max_in_flight": 4}
    by_messages = asyncio.run(run_episodes(env, 4, policy=policy, **kwargs))
    by_tokens = asyncio.run(run_episodes(env, 4, token_policy=token_policy, tokenizer=tokenizer, **kwargs))
    key = lambda e: e.seed  # noqa: E731 - sort both runs by start state
    return sorted(by_messages, key=key), sorted(by_tokens, key=key)


def test_runner_episodes_give_the_same_sequence_from_messages_and_from_tokens() -> None:
    tokenizer = build_chat_tokenizer()
    by_messages, by_tokens = _runs(tokenizer)
    assert [e.num_turns for e in by_messages] == [e.num_turns for e in by_tokens]
    # The message policy's turns have no generated ids; give them what the token policy generated.
    for m, t in zip(by_messages, by_tokens, strict=True):
        for mt, tt in zip(m.turns, t.turns, strict=True):
            assert mt.action == tt.action
            mt.action_token_ids = tt.action_token_ids
    advantages = rebn_advantages(by_tokens, 0.9)
    from_messages = episodes_to_sequences(by_messages, tokenizer, advantages=advantages)
    from_tokens = episodes_to_sequences(by_tokens, advantages=advantages)  # no tokenizer needed
    for a, b in zip(from_messages, from_tokens, strict=True):
        assert np.array_equal(a.input_ids, b.input_ids)
        assert np.array_equal(a.loss_mask, b.loss_mask)
        assert np.array_equal(a.token_advantages, b.token_advantages)  # type: ignore[arg-type]
    # The per-transition layout reads the runner's prompt ids as they are.
    samples = episodes_to_transitions(by_tokens, advantages)
    assert [s.prompt_ids for s in samples] == [t.prompt_token_ids for e in by_tokens for t in e.turns]
