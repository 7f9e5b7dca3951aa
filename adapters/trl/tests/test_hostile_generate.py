"""A hostile model backend through GemRollout: a typed error naming the episodes, then the next rollout is whole.

The generate contract (docs/rl.md) holds through the adapter: whatever a batched
``generate`` returns (``None``, an int, a dict, too few answers, ids outside the
vocabulary, NaN logprobs), ``GemRollout.play`` raises ``GenerateContractError`` naming
the episodes, and the same rollout then plays and lays out the next batch as if nothing
had happened.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
from gem_trl import GemRollout, build_tiny_tokenizer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gem_core.episode import Generation, TurnRequest
from gem_core.errors import GenerateContractError

ENV_ID = "core:NumberGuess-v0"


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tiny_tokenizer()


def good(tokenizer: Any, request: TurnRequest) -> Generation:
    ids = [*tokenizer.encode("My guess is 0", add_special_tokens=False), tokenizer.eos_token_id]  # never wins
    return Generation(token_ids=ids, logprobs=[-0.5] * len(ids))


def hostile_answers(tokenizer: Any) -> dict[str, Any]:
    """One bad answer per kind, and for a whole batch."""
    vocab = len(tokenizer)
    return {
        "none": None,
        "int": 7,
        "dict": {"token_ids": [1]},
        "text-in-token-mode": "My guess is 3",
        "id-past-vocabulary": Generation(token_ids=[1, vocab]),
        "negative-id": Generation(token_ids=[-1]),
        "nan-logprob": Generation(token_ids=[1, 2], logprobs=[-0.1, math.nan]),
        "minus-inf-logprob": Generation(token_ids=[1, 2], logprobs=[-math.inf, -0.1]),
        "short-logprobs": Generation(token_ids=[1, 2], logprobs=[-0.1]),
    }


BATCH_FAULTS = ["batch-none", "batch-int", "batch-dict", "batch-too-few"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    fault=st.sampled_from([*hostile_answers(build_tiny_tokenizer()), *BATCH_FAULTS]),
    episodes=st.integers(1, 4),
    bad_turn=st.integers(0, 2),
    data=st.data(),
)
def test_a_hostile_generate_is_a_typed_error_and_the_next_rollout_is_whole(
    tokenizer: Any, fault: str, episodes: int, bad_turn: int, data: st.DataObject
) -> None:
    rollout = GemRollout(max_turn_tokens=16, max_turns=3, env_kwargs={"max_turns": 5})
    rollout.setup(SimpleNamespace(processing_class=tokenizer, chat_template_kwargs={}, max_completion_length=512))
    bad = data.draw(st.sets(st.integers(0, episodes - 1), min_size=1), label="bad episodes")
    answers = hostile_answers(tokenizer)

    def hostile(requests: list[TurnRequest]) -> Any:
        if requests[0].turn != bad_turn:
            return [good(tokenizer, r) for r in requests]
        if fault == "batch-none":
            return None
        if fault == "batch-int":
            return len(requests)
        if fault == "batch-dict":
            return {r.episode_index: good(tokenizer, r) for r in requests}
        if fault == "batch-too-few":
            return [good(tokenizer, r) for r in requests][1:]
        return [answers[fault] if r.episode_index in bad else good(tokenizer, r) for r in requests]

    keys = [(ENV_ID, 100 + i) for i in range(episodes)]
    with pytest.raises(GenerateContractError) as info:
        rollout.play(keys, hostile)
    named = info.value.episodes
    if fault in BATCH_FAULTS:  # the whole call is named
        assert sorted(named) == sorted(f"{ENV_ID} seed={seed} turn={bad_turn}" for _, seed in keys)
    else:  # exactly the episodes that got a bad answer
        assert sorted(named) == sorted(f"{ENV_ID} seed={100 + i} turn={bad_turn}" for i in bad)
    assert "a generate must return" in str(info.value)

    # The rollout (its env pool, engine and timings) is unharmed: the next batch plays and lays out whole.
    out = rollout.to_trl(rollout.play(keys, lambda requests: [good(tokenizer, r) for r in requests]))
    assert len(out["completion_ids"]) == episodes and out["num_turns"] == [3] * episodes
    for ids, mask, logprobs in zip(out["completion_ids"], out["env_mask"], out["logprobs"], strict=True):
        assert len(ids) == len(mask) == len(logprobs) and all(math.isfinite(x) for x in logprobs)
