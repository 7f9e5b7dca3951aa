"""The Responses API through the openai SDK's ``client.responses.create``: items, function calls, streaming events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from gem_core.episode import Generation, TurnRequest
from gem_gateway.capture import Gateway
from gem_gateway.server import run_in_thread

TOOLS = [
    {
        "type": "function",
        "name": "add",
        "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    }
]
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'


@pytest.fixture
def served(tokenizer: Any, scripted: Any) -> Iterator[tuple[Gateway, Any, openai.OpenAI]]:
    replies = iter([CALL, "2+3 = 5"])
    engine = scripted(lambda request: next(replies, "done"))
    gateway = Gateway(engine, tokenizer, model_name="m")
    with (
        run_in_thread(gateway) as url,
        openai.OpenAI(base_url=f"{url}/s/r1/v1", api_key="unused", max_retries=0, timeout=60) as sdk,
    ):
        yield gateway, engine, sdk


def test_a_function_call_round_trip_is_one_consistent_episode(served: Any) -> None:
    gateway, engine, sdk = served
    first = sdk.responses.create(model="m", instructions="Use the tools.", input="What is 2+3?", tools=TOOLS)
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert (call.name, json.loads(call.arguments)) == ("add", {"a": 2, "b": 3})
    assert (
        first.status == "completed" and first.usage is not None and first.usage.output_tokens == len(engine.seen[0][1])
    )
    items: list[Any] = [{"role": "user", "content": "What is 2+3?"}]
    items += [item.model_dump(exclude_none=True) for item in first.output]
    items += [{"type": "function_call_output", "call_id": call.call_id, "output": "5"}]
    second = sdk.responses.create(model="m", instructions="Use the tools.", input=items, tools=TOOLS)
    assert second.output_text == "2+3 = 5"
    episode = gateway.finish("r1", 1.0)
    assert episode.metadata["branch_points"] == []  # the echoed function call extends the first call's tokens
    assert [(list(t.prompt_token_ids), t.action_token_ids) for t in episode.turns] == engine.seen
    assert engine.seen[1][0][: len(engine.seen[0][0]) + len(engine.seen[0][1])] == engine.seen[0][0] + engine.seen[0][1]


def test_streamed_events_carry_the_answer(served: Any) -> None:
    _, _, sdk = served
    events = list(sdk.responses.create(model="m", input="What is 2+3?", tools=TOOLS, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert json.loads(done.arguments) == {"a": 2, "b": 3}
    final = events[-1].response
    assert [item.type for item in final.output] == ["function_call"]
    text = list(sdk.responses.create(model="m", input=[{"role": "user", "content": "go"}], stream=True))
    deltas = "".join(e.delta for e in text if e.type == "response.output_text.delta")
    assert deltas == text[-1].response.output_text == "2+3 = 5"


def test_a_reply_cut_at_max_output_tokens_is_incomplete(tokenizer: Any) -> None:
    async def cut(request: TurnRequest) -> Generation:  # an engine that ran out of tokens mid-answer
        ids = tokenizer.encode("2+3 = 5 and then some more", add_special_tokens=False)[: request.max_tokens]
        return Generation(token_ids=ids, finish_reason="length")

    with (
        run_in_thread(Gateway(cut, tokenizer)) as url,
        openai.OpenAI(base_url=f"{url}/s/r2/v1", api_key="unused", max_retries=0, timeout=60) as sdk,
    ):
        answer = sdk.responses.create(model="m", input="What is 2+3?", max_output_tokens=4)
    assert answer.status == "incomplete" and answer.incomplete_details is not None
    assert answer.incomplete_details.reason == "max_output_tokens"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"input": "hi", "previous_response_id": "resp_1"}, "keeps no response state"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "has type 'reasoning'"),
        ({"input": "hi", "tools": [{"type": "web_search"}]}, "is not a function tool"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "not a text part"),
        ({"input": []}, "non-empty list"),
        ({"input": [{"role": "assistant", "content": "prefill"}]}, "last input is the assistant's|last message"),
        ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens must be a positive integer"),
    ],
    ids=["previous-response", "reasoning-item", "builtin-tool", "image", "empty", "prefill", "zero-tokens"],
)
def test_what_is_not_served_is_a_typed_400_naming_it(served: Any, fields: dict[str, Any], message: str) -> None:
    _, engine, sdk = served
    with pytest.raises(openai.BadRequestError, match=message):
        sdk.responses.create(model="m", **fields)
    assert not engine.seen  # refused before the engine was asked
