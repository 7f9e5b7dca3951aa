"""vLLM outputs -> engine generations; the errors a misconfigured sampler gets."""

from __future__ import annotations

from typing import Any

import pytest
from gem_oat.convert import generation_from_vllm
from hypothesis import given, settings
from hypothesis import strategies as st
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sequence import Logprob

from gem_core.errors import TrajectoryError
from gem_core.testing import REPLY_ENDINGS, engine_reading, sampled_reply
from gem_core.testing_tokenizers import build_chat_tokenizer

EOS = 99


def output(ids: list[int], finish: str, logprobs: Any = "per-token") -> RequestOutput:
    if logprobs == "per-token":
        logprobs = [{t: Logprob(-0.25 * (i + 1), 1, str(t)), t + 1: Logprob(-9.0, 2, "x")} for i, t in enumerate(ids)]
    completion = CompletionOutput(0, "text", ids, None, logprobs, finish, None)
    return RequestOutput("r0", None, [1, 2], None, [completion], True)


@pytest.mark.parametrize(
    ("ids", "finish", "expected"),
    [
        ([5, 6, EOS], "stop", "stop"),
        ([5, 6, 7], "length", "length"),
        ([5, 6, EOS], "length", "stop"),  # the stop token was the last allowed token (vLLM V1)
        ([5], "abort", "abort"),
        ([5, 6], "error", "error"),  # passed on for the engine's contract to refuse, never read as "stop"
        ([5, 6], "repetition", "repetition"),
    ],
    ids=["stop", "cut", "stop-token-at-the-cap", "abort", "error", "repetition"],
)
def test_finish_reason_and_logprobs_of_the_sampled_tokens(ids: list[int], finish: str, expected: str) -> None:
    generation = generation_from_vllm(output(ids, finish), stop_ids={EOS})
    assert generation.finish_reason == expected
    assert generation.token_ids == ids
    assert generation.logprobs == [-0.25 * (i + 1) for i in range(len(ids))]
    assert generation.text == "text"


def test_no_logprobs_requested_gives_none() -> None:
    assert generation_from_vllm(output([5, EOS], "stop", logprobs=None)).logprobs is None


def test_logprobs_missing_a_sampled_token_is_a_typed_error() -> None:
    with pytest.raises(TrajectoryError, match="logprobs=1"):
        generation_from_vllm(output([5, EOS], "stop", logprobs=[{5: Logprob(-0.1)}, {7: Logprob(-0.2)}]))


def test_no_completion_is_a_typed_error() -> None:
    empty = RequestOutput("r1", None, [1], None, [], True)
    with pytest.raises(TrajectoryError, match="no completion"):
        generation_from_vllm(empty)


def test_an_actor_without_logprobs_gets_a_typed_error(tmp_path: Any, make_actor: Any) -> None:
    from gem_core.testing_tokenizers import build_chat_tokenizer

    tokenizer = build_chat_tokenizer("chatml")

    def policy(prompt_ids: list[int]) -> tuple[list[int], list[float]]:
        return [*tokenizer.encode("My guess is 3", add_special_tokens=False), tokenizer.eos_token_id], [0.0] * 8

    actor = make_actor(tmp_path, tokenizer, policy, env_ids=["core:NumberGuess-v0"], episodes_per_step=1, max_turns=1)
    actor.sampling_params.logprobs = None
    with pytest.raises(TrajectoryError, match="no logprobs"):
        actor.collect_experience()


# vLLM V1's finish reasons for each way a reply ends (it tests the length before the stop token).
VLLM_SAID = {"stop": "stop", "stop-at-limit": "length", "cut": "length", "abort": "abort"}


@settings(max_examples=40, deadline=None)
@given(ending=st.sampled_from(REPLY_ENDINGS), max_tokens=st.integers(2, 24))
def test_no_cut_is_read_as_a_stop(ending: str, max_tokens: int) -> None:
    tokenizer = build_chat_tokenizer("chatml")
    eos = int(tokenizer.eos_token_id)
    ids = sampled_reply(ending, max_tokens, eos, filler_id=47)
    generation = generation_from_vllm(output(ids, VLLM_SAID[ending]), stop_ids={eos})
    assert engine_reading(generation, tokenizer, max_tokens) == {"stop-at-limit": "stop"}.get(ending, ending)
