"""A hostile LLM server through ``gem_env_agent``: a typed error naming the episode, then the next rollout is whole.

The engine checks every ``generate`` answer at its boundary (docs/rl.md, "The generate
contract"). The loop hands the server's ``TokenOutput`` on as it came (no ``int()`` /
``float()`` that would raise a raw ``TypeError`` or truncate a float id, and an unknown
``stop_reason`` is not read as a stop), so whatever the server sends (wrong types, ids
outside the vocabulary, NaN log-probs, ``"error"`` or unknown stop reasons) ends the
episode's ``run`` with ``GenerateContractError`` naming it. The same loop then plays the
next episode exactly as a fault-free loop does. The server is the harness's stand-in
(verl's servers need a GPU engine), answering with verl's own ``TokenOutput``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from verl.workers.rollout.replica import TokenOutput
from verl_harness import Server, config, make_loop, row

from gem_core.conformance import CASES
from gem_core.errors import GenerateContractError

BISECT = next(case for case in CASES if case.name == "bisect")
ENV = BISECT.env_id
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}


def _wrong(turn: int, text: str) -> str:
    return "My guess is 0"  # never right: every episode lasts several turns


WRONG = dataclasses.replace(BISECT, name="wrong", reply=_wrong)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return BISECT.tokenizer()


def hostile_fields(vocab: int) -> dict[str, dict[str, Any]]:
    """One bad ``TokenOutput`` field per kind, as a server could send it."""
    return {
        "ids-none": {"token_ids": None},
        "ids-int": {"token_ids": 7},
        "ids-text": {"token_ids": "My guess is 3"},
        "ids-floats": {"token_ids": [1.7, 2.2], "log_probs": None},
        "id-past-vocabulary": {"token_ids": [1, vocab], "log_probs": [-0.1, -0.2]},
        "negative-id": {"token_ids": [-1], "log_probs": [-0.1]},
        "nan-logprob": {"token_ids": [1, 2], "log_probs": [-0.1, math.nan]},
        "minus-inf-logprob": {"token_ids": [1, 2], "log_probs": [-math.inf, -0.1]},
        "short-logprobs": {"token_ids": [1, 2], "log_probs": [-0.1]},
        "logprobs-text": {"token_ids": [1, 2], "log_probs": "ab"},
        "stop-reason-error": {"stop_reason": "error"},
        "stop-reason-unknown": {"stop_reason": "exploded"},
        "stop-reason-int": {"stop_reason": 3},
    }


class HostileServer(Server):
    """The stand-in server, answering its ``bad_call``-th request with a broken ``TokenOutput`` while armed."""

    def __init__(self, tokenizer: Any, fields: dict[str, Any], bad_call: int) -> None:
        super().__init__(WRONG, tokenizer)
        self.fields = fields
        self.bad_call = bad_call
        self.armed = True

    async def generate(self, request_id: str, **kwargs: Any) -> Any:
        output = await super().generate(request_id, **kwargs)
        if not self.armed or len(self.calls) - 1 != self.bad_call:
            return output
        # model_construct: what arrives when a server skips validation (or a newer one changes a field's type)
        return TokenOutput.model_construct(**{**output.model_dump(), **self.fields})


def snapshot(outputs: list[Any]) -> list[tuple[Any, ...]]:
    return [(o.prompt_ids, o.response_ids, o.response_mask, o.response_logprobs, o.num_turns) for o in outputs]


def fault_free(tokenizer: Any, seed: int) -> list[tuple[Any, ...]]:
    async def run() -> list[Any]:
        return await make_loop(config(WRONG), Server(WRONG, tokenizer), tokenizer).run(SAMPLING, **row(ENV, seed))

    return snapshot(asyncio.run(run()))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fault=st.sampled_from(sorted(hostile_fields(0))), bad_call=st.integers(0, 2), seed=st.integers(0, 3))
def test_a_hostile_server_answer_is_a_typed_error_and_the_next_episode_is_whole(
    tokenizer: Any, fault: str, bad_call: int, seed: int
) -> None:
    server = HostileServer(tokenizer, hostile_fields(len(tokenizer))[fault], bad_call)

    async def run() -> tuple[GenerateContractError, list[Any]]:
        loop = make_loop(config(WRONG), server, tokenizer)
        with pytest.raises(GenerateContractError) as info:
            await loop.run(SAMPLING, **row(ENV, seed))
        server.armed = False
        return info.value, await loop.run(SAMPLING, **row(ENV, seed))

    error, after = asyncio.run(run())
    assert error.episodes == [f"{ENV} seed={seed} turn={bad_call}"]
    assert "a generate must return" in str(error)
    # the same loop plays the next episode as a loop that never saw the fault: nothing stale
    assert snapshot(after) == fault_free(tokenizer, seed)
    (out,) = after
    assert all(math.isfinite(x) for x in out.response_logprobs or [])
