"""A hostile vLLM engine through gem's AgentExecutor: a typed error naming the episode, then the next rollout is whole.

``generation_from_request_output`` hands vLLM's ids, log-probs and finish reason on as
they came, so the engine's generate contract (docs/rl.md) sees them: wrong types, ids
outside the vocabulary, NaN log-probs, a finish reason ``None`` / ``"error"`` / unknown
end OpenRLHF's ``generate_responses`` with ``GenerateContractError`` naming the
episode; a ``RequestOutput`` without a completion, or log-probs that do not cover the
sampled ids, with ``TrajectoryError`` and the engine's note naming it. The same rollout
actor then plays the next prompt exactly as one that never saw the fault. The vLLM
engine is the stand-in of ``standins`` (vLLM's fields, held by ``test_patch``'s contract).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from gem_openrlhf.dataset import EpisodeRequest
from harness import generate_responses, rollout_actor, sampling_params
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from standins import Logprob, StandInLLM

from gem_core.conformance import CASES, scripted_generation
from gem_core.errors import GenerateContractError, TrajectoryError
from gem_core.testing import REPLY_ENDINGS, engine_reading, sampled_reply

CASE = dataclasses.replace(CASES[0], reply=lambda turn, text: "My guess is 0")  # never right: several turns
PARAMS = sampling_params(logprobs=True)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return CASE.tokenizer()


def hostile_completions(vocab: int) -> dict[str, dict[str, Any]]:
    """One bad field of vLLM's ``CompletionOutput`` per kind (``outputs`` for the empty request)."""
    return {
        "no-completion": {"outputs": []},
        "ids-none": {"token_ids": None, "logprobs": None},
        "ids-text": {"token_ids": "My guess is 3", "logprobs": None},
        "ids-floats": {"token_ids": [1.7, 2.2]},
        "id-past-vocabulary": {"token_ids": [1, vocab], "logprobs": [{1: Logprob(-0.1)}, {vocab: Logprob(-0.2)}]},
        "negative-id": {"token_ids": [-1], "logprobs": [{-1: Logprob(-0.1)}]},
        "nan-logprob": {"token_ids": [1, 2], "logprobs": [{1: Logprob(-0.1)}, {2: Logprob(math.nan)}]},
        "logprobs-miss-the-id": {"token_ids": [1, 2], "logprobs": [{1: Logprob(-0.1)}, {3: Logprob(-0.1)}]},
        "short-logprobs": {"token_ids": [1, 2], "logprobs": [{1: Logprob(-0.1)}]},
        "finish-none": {"finish_reason": None},
        "finish-error": {"finish_reason": "error"},
        "finish-unknown": {"finish_reason": "exploded"},
    }


TRAJECTORY_FAULTS = {"no-completion", "logprobs-miss-the-id", "short-logprobs"}


class HostileLLM(StandInLLM):
    """The stand-in vLLM engine, answering its ``bad_call``-th request with a broken output while armed."""

    def __init__(self, tokenizer: Any, fields: dict[str, Any], bad_call: int) -> None:
        super().__init__(tokenizer, lambda ids, max_tokens: scripted_generation(CASE, tokenizer, ids, max_tokens))
        self.fields = fields
        self.bad_call = bad_call
        self.armed = True

    async def generate(self, prompt: dict[str, Any], sampling_params: Any, request_id: str) -> Any:
        async for output in super().generate(prompt, sampling_params, request_id):
            if self.armed and len(self.calls) - 1 == self.bad_call:
                if "outputs" in self.fields:
                    output = dataclasses.replace(output, outputs=self.fields["outputs"])
                else:
                    output.outputs[0] = dataclasses.replace(output.outputs[0], **self.fields)
            yield output


def play(actor: Any, tokenizer: Any, seed: int) -> list[dict[str, Any]]:
    prompt = EpisodeRequest(env_id=CASE.env_id, seed=seed).to_prompt()
    return generate_responses(actor, prompt, tokenizer, max_len=400, params=PARAMS)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fault=st.sampled_from(sorted(hostile_completions(0))), bad_call=st.integers(0, 2), seed=st.integers(0, 3))
def test_a_hostile_vllm_output_is_a_typed_error_and_the_next_rollout_is_whole(
    tokenizer: Any, fault: str, bad_call: int, seed: int
) -> None:
    llm = HostileLLM(tokenizer, hostile_completions(len(tokenizer))[fault], bad_call)
    actor = rollout_actor(llm)
    with pytest.raises(TrajectoryError) as info:  # GenerateContractError is one
        play(actor, tokenizer, seed)
    where = f"{CASE.env_id} seed={seed} turn={bad_call}"
    if fault in TRAJECTORY_FAULTS:  # raised inside generate: the engine's note names the episode
        assert f"({CASE.env_id}/seed={seed}, turn {bad_call})" in "\n".join(getattr(info.value, "__notes__", []))
    else:
        assert isinstance(info.value, GenerateContractError) and info.value.episodes == [where]

    llm.armed = False
    after = play(actor, tokenizer, seed)  # the same actor and executor: nothing stale
    fresh = play(rollout_actor(HostileLLM(tokenizer, {}, -1)), tokenizer, seed)
    assert after == fresh
    (response,) = after
    assert all(math.isfinite(x) for x in response["rollout_log_probs"])


# vLLM V1's finish reasons for each way a reply ends (it tests the length before the stop token).
VLLM_SAID = {"stop": "stop", "stop-at-limit": "length", "cut": "length", "abort": "abort"}


@settings(max_examples=40, deadline=None)
@given(ending=st.sampled_from(REPLY_ENDINGS), max_tokens=st.integers(2, 24))
def test_no_cut_is_read_as_a_stop(ending: str, max_tokens: int) -> None:
    from gem_openrlhf.executor import generation_from_request_output
    from standins import CompletionOutput, RequestOutput

    from gem_core.testing_tokenizers import build_chat_tokenizer

    tokenizer = build_chat_tokenizer("chatml")
    eos = int(tokenizer.eos_token_id)
    ids = sampled_reply(ending, max_tokens, eos, filler_id=47)
    logprobs = [{t: Logprob(-0.5, 1, str(t))} for t in ids]
    completion = CompletionOutput(0, "text", ids, None, logprobs, finish_reason=VLLM_SAID[ending])
    generation = generation_from_request_output(RequestOutput("r0", None, [1, 2], None, [completion], True))
    assert engine_reading(generation, tokenizer, max_tokens) == {"stop-at-limit": "stop"}.get(ending, ending)
