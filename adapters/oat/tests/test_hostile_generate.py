"""Hostile vLLM outputs through GemOatActor: a typed error naming the episodes, then the next step is whole.

``generation_from_vllm`` hands vLLM's ids, log-probs and finish reason on as they came,
so the engine's generate contract (docs/rl.md) judges them in ``play_batch``: wrong
types, ids outside the vocabulary, NaN log-probs, a finish reason ``"error"``, ``None``
or unknown end ``collect_experience`` with ``GenerateContractError`` naming exactly the
episodes that got them; a request without a completion, or log-probs that do not cover
the sampled ids, with ``TrajectoryError`` and a note naming every episode of the call.
The same actor's next step then equals the step a fault-free actor plays there. vLLM is
the stand-in of ``standins/inference`` (vLLM 0.8.4's ``LLM`` with its own output types).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vllm.sequence import Logprob

from gem_core.errors import GenerateContractError, TrajectoryError
from gem_core.testing_tokenizers import build_chat_tokenizer

ENV_ID = "core:NumberGuess-v0"


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_chat_tokenizer("chatml")


def wrong_guesser(tokenizer: Any) -> Any:
    def policy(prompt_ids: list[int]) -> tuple[list[int], list[float]]:
        ids = [*tokenizer.encode("My guess is 0", add_special_tokens=False), int(tokenizer.eos_token_id)]
        return ids, [-0.5] * len(ids)  # never right: every episode lasts its turns

    return policy


def hostile_completions(vocab: int) -> dict[str, dict[str, Any]]:
    """One bad field of vLLM's ``CompletionOutput`` per kind (``outputs`` for the empty request)."""
    return {
        "no-completion": {"outputs": []},
        "ids-none": {"token_ids": None},
        "ids-text": {"token_ids": "My guess is 3"},
        "ids-floats": {"token_ids": [1.7, 2.2]},
        "id-past-vocabulary": {"token_ids": [1, vocab], "logprobs": [{1: Logprob(-0.1)}, {vocab: Logprob(-0.2)}]},
        "negative-id": {"token_ids": [-1], "logprobs": [{-1: Logprob(-0.1)}]},
        "nan-logprob": {"token_ids": [1, 2], "logprobs": [{1: Logprob(-0.1)}, {2: Logprob(math.nan)}]},
        "logprobs-miss-the-id": {"token_ids": [1, 2], "logprobs": [{1: Logprob(-0.1)}, {3: Logprob(-0.1)}]},
        "text-not-str": {"text": 7},
        "finish-none": {"finish_reason": None},
        "finish-error": {"finish_reason": "error"},
        "finish-unknown": {"finish_reason": "exploded"},
    }


CALL_FAULTS = {"no-completion", "logprobs-miss-the-id"}  # raised inside generate: the whole call is named


def transitions(episodes: list[list[Any]]) -> list[list[tuple[Any, ...]]]:
    return [
        [(list(t.prompt_ids), list(t.response_ids), list(t.response_logprobs), t.rewards) for t in ep]
        for ep in episodes
    ]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    fault=st.sampled_from(sorted(hostile_completions(0))),
    episodes=st.integers(1, 3),
    bad_turn=st.integers(0, 1),
    data=st.data(),
)
def test_a_hostile_vllm_output_is_a_typed_error_and_the_next_step_is_whole(
    tmp_path_factory: pytest.TempPathFactory,
    tokenizer: Any,
    make_actor: Any,
    fault: str,
    episodes: int,
    bad_turn: int,
    data: st.DataObject,
) -> None:
    bad = data.draw(st.sets(st.integers(0, episodes - 1), min_size=1), label="bad episodes")
    fields = hostile_completions(len(tokenizer))[fault]
    options = {"env_ids": [ENV_ID], "episodes_per_step": episodes, "max_turns": 3}
    actor = make_actor(tmp_path_factory.mktemp("hostile"), tokenizer, wrong_guesser(tokenizer), **options)
    vllm_generate, turn = actor.generate, [0]

    def hostile(prompts: list[Any], params: list[Any]) -> list[Any]:
        outputs = vllm_generate(prompts, params)
        if turn[0] == bad_turn:
            for index in bad:
                if "outputs" in fields:
                    outputs[index].outputs = fields["outputs"]
                else:
                    for name, value in fields.items():
                        setattr(outputs[index].outputs[0], name, value)
        turn[0] += 1
        return outputs

    actor.generate = hostile
    with pytest.raises(TrajectoryError) as info:  # GenerateContractError is one
        actor.collect_experience()
    seeds = [actor.args.env_seed + i for i in range(episodes)]
    if fault in CALL_FAULTS:
        # named in the message (Python 3.10, oat's, has no exception notes): the first episode with a bad output
        assert str(info.value).startswith(f"episode {ENV_ID} seed={seeds[min(bad)]} turn={bad_turn}: vLLM request")
    else:
        assert isinstance(info.value, GenerateContractError)
        assert sorted(info.value.episodes) == sorted(f"{ENV_ID} seed={seeds[i]} turn={bad_turn}" for i in bad)

    actor.generate = vllm_generate
    after, _ = actor.collect_experience()  # the same actor and engine: nothing stale
    fresh = make_actor(tmp_path_factory.mktemp("fresh"), tokenizer, wrong_guesser(tokenizer), **options)
    fresh.collect_experience()  # the step the failed one replaced: the seeds count on as after a fault
    expected, _ = fresh.collect_experience()
    assert transitions(after) == transitions(expected) and len(after) == episodes
