"""Sessions, drift detection and episodes, in process (the HTTP side is test_server.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gem_core.chat import render_ids
from gem_core.episode import Generation
from gem_core.rl.advantages import rebn_advantages
from gem_core.rl.layouts import episode_segments, episode_to_segments, episode_to_sequence
from gem_core.rl.types import Episode
from gem_gateway.capture import Gateway, GatewayLimits, parse_chat_request
from gem_gateway.errors import (
    BadRequest,
    GatewayOverloaded,
    GenerateFailed,
    GenerateTimedOut,
    NotFound,
    SessionClosed,
    SessionLimit,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        },
    }
]
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'


def call(gateway: Gateway, key: str, messages: list[dict[str, Any]], **body: Any) -> Any:
    return asyncio.run(gateway.complete(key, parse_chat_request({"messages": messages, **body})))


def as_sent(record: Any) -> dict[str, Any]:
    """The assistant message as an SDK sends it back (arguments as a JSON string)."""
    message: dict[str, Any] = {"role": "assistant", "content": record.reply["content"] or None}
    if record.reply.get("tool_calls"):
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"])},
            }
            for c in record.reply["tool_calls"]
        ]
    return message


def test_an_agent_loop_is_one_segment_and_keeps_sampled_ids_as_they_are(tokenizer: Any, scripted: Any) -> None:
    replies = iter([CALL, "The sum is 5."])
    engine = scripted(lambda request: next(replies))
    gateway = Gateway(engine, tokenizer)
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"}]
    first = call(gateway, "s", history, tools=TOOLS)
    assert first.finish_reason == "tool_calls"
    assert first.reply["tool_calls"][0]["function"] == {"name": "add", "arguments": {"a": 2, "b": 3}}
    assert first.reply["content"] == ""
    history += [as_sent(first), {"role": "tool", "tool_call_id": "call_0_0", "content": "5"}]
    second = call(gateway, "s", history, tools=TOOLS)
    assert second.finish_reason == "stop" and second.reply["content"] == "The sum is 5."
    # token in, token out: the second prompt carries the first call's ids as sampled (one per character),
    # which a whole re-render of the history would not (it encodes the text canonically)
    assert second.prompt_ids[: len(first.prompt_ids) + len(first.completion_ids)] == (
        first.prompt_ids + first.completion_ids
    )
    normalised = parse_chat_request({"messages": history}).messages
    rendered = render_ids(tokenizer, normalised, add_generation_prompt=True, chat_template_kwargs={"tools": TOOLS})
    assert rendered != second.prompt_ids
    assert tokenizer.decode(second.prompt_ids) == tokenizer.decode(rendered)
    assert [prompt for prompt, _ in engine.seen] == [first.prompt_ids, second.prompt_ids]
    episode = gateway.finish("s", 1.0)
    assert episode.metadata["branch_points"] == []
    assert [t.action_token_ids for t in episode.turns] == [ids for _, ids in engine.seen]
    sequence = episode_to_sequence(episode)
    assert sequence.input_ids.tolist() == second.prompt_ids + second.completion_ids
    assert episode.turns[-1].reward == 1.0 and episode.turns[0].reward == 0.0


@pytest.mark.parametrize(
    ("change", "branch"),
    [
        pytest.param(
            lambda h: [h[0], {"role": "user", "content": "Summary: 2+3 asked."}, *h[2:]], "rewritten", id="summarised"
        ),
        pytest.param(lambda h: [h[0], *h[3:]], "rewritten", id="truncated"),
        pytest.param(
            lambda h: [*h[:2], {**h[2], "content": "<think>x</think>"}, *h[3:]], "rewritten", id="reply-edited"
        ),
    ],
)
def test_a_history_that_does_not_extend_is_a_branch_point(
    tokenizer: Any, scripted: Any, change: Any, branch: str
) -> None:
    gateway = Gateway(scripted(lambda r: f"answer {r.turn}"), tokenizer)
    history: list[dict[str, Any]] = [{"role": "system", "content": "S"}, {"role": "user", "content": "2+3?"}]
    first = call(gateway, "s", history)
    history = [*history, as_sent(first), {"role": "user", "content": "and 4+4?"}]
    second = call(gateway, "s", change(history))
    assert (second.parent, second.branch) == (None, branch)
    episode = gateway.finish("s", 0.5)
    assert episode.metadata["branch_points"] == [1]
    assert episode_segments(episode) == [(0, 1), (1, 2)]
    sequences = episode_to_segments(episode, advantages=[0.5, 0.5])
    assert [s.input_ids[s.loss_mask == 1].tolist() for s in sequences] == [first.completion_ids, second.completion_ids]


def test_a_retry_of_an_earlier_call_is_a_fork_and_a_tool_change_is_named(tokenizer: Any, scripted: Any) -> None:
    gateway = Gateway(scripted(lambda r: f"answer {r.turn}"), tokenizer)
    base: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    first = call(gateway, "s", base)
    after_first = [*base, as_sent(first), {"role": "user", "content": "more"}]
    second = call(gateway, "s", after_first)
    assert (second.parent, second.branch) == (0, None)
    third = call(gateway, "s", [*base, as_sent(first), {"role": "user", "content": "other"}])
    assert (third.parent, third.branch) == (0, "fork")
    fourth = call(gateway, "s", [*after_first, as_sent(second), {"role": "user", "content": "x"}], tools=TOOLS)
    assert (fourth.parent, fourth.branch) == (None, "tools")


Step = tuple[str, int]
steps = st.lists(
    st.tuples(st.sampled_from(["continue", "rewrite", "retry", "tools", "truncate"]), st.integers(0, 50)),
    min_size=1,
    max_size=7,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schedule=steps)
def test_recorded_branch_points_are_where_the_layout_splits(
    tokenizer: Any, scripted: Any, schedule: list[Step]
) -> None:
    """Any schedule of harness behaviour: the gateway's branch points are exactly the layout's segment starts,
    every prompt is what the engine got, and every sampled token is trained once."""
    engine = scripted(lambda r: f"reply {r.turn} {'xyz' * (r.turn % 3)}")
    gateway = Gateway(engine, tokenizer)
    history: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    tools: list[dict[str, Any]] | None = None
    records, histories = [], []
    for what, pick in schedule:
        if records and what == "continue":
            history = [*history, as_sent(records[-1]), {"role": "user", "content": f"obs {len(records)}"}]
        elif records and what == "retry":
            old = pick % len(records)
            history = [*histories[old], as_sent(records[old]), {"role": "user", "content": f"again {len(records)}"}]
        elif records and what == "rewrite":
            history = [{"role": "user", "content": f"summary {pick}"}]
        elif records and what == "truncate":
            history = [*history[:1], {"role": "user", "content": f"cut {pick}"}]
        elif records and what == "tools":
            tools = None if tools else TOOLS
            history = [*history, as_sent(records[-1]), {"role": "user", "content": "tools"}]
        histories.append(history)
        records.append(call(gateway, "s", history, tools=tools))
    episode = gateway.finish("s", 1.0)
    assert [prompt for prompt, _ in engine.seen] == [r.prompt_ids for r in records]
    starts = [start for start, _ in episode_segments(episode)]
    assert starts == [0, *episode.metadata["branch_points"]]
    advantages = rebn_advantages([episode], gamma=1.0)[0]
    sequences = episode_to_segments(episode, advantages=advantages)
    trained = [t for s in sequences for t in s.input_ids[s.loss_mask == 1].tolist()]
    assert trained == [t for r in records for t in r.completion_ids]
    assert Episode.from_json(episode.to_json()).to_dict() == episode.to_dict()


def test_policy_versions_and_logprobs_are_recorded_per_call(tokenizer: Any, scripted: Any) -> None:
    gateway = Gateway(scripted(lambda r: "ok"), tokenizer)
    call(gateway, "s", [{"role": "user", "content": "a"}])
    gateway.policy_version = 3
    first = gateway.sessions["s"].calls[0]
    call(gateway, "s", [{"role": "user", "content": "a"}, as_sent(first), {"role": "user", "content": "b"}])
    episode = gateway.finish("s", 0.0)
    sequence = episode_to_sequence(episode)
    assert sorted(set(sequence.token_policy_versions[sequence.loss_mask == 1].tolist())) == [0, 3]
    assert np.allclose(sequence.token_logprobs[sequence.loss_mask == 1], -0.25)


def test_stop_strings_cut_the_reply_and_keep_the_sampled_ids_up_to_it(tokenizer: Any, scripted: Any) -> None:
    gateway = Gateway(scripted(lambda r: "Thought: add\nObservation: 5"), tokenizer)
    record = call(gateway, "s", [{"role": "user", "content": "a"}], stop=["Observation:"])
    assert record.text == "Thought: add\n" and record.finish_reason == "stop"
    assert tokenizer.decode(record.completion_ids).startswith("Thought: add\nObservation:")
    assert len(record.logprobs) == len(record.completion_ids)


# --------------------------------------------------------------------------- bounds and typed errors


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param({}, "messages must be a non-empty list", id="no-messages"),
        pytest.param({"messages": [{"role": "robot", "content": "x"}]}, "role must be one of", id="bad-role"),
        pytest.param({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n must be 1", id="n"),
        pytest.param(
            {"messages": [{"role": "assistant", "content": "x"}]}, "last message is the assistant", id="prefill"
        ),
        pytest.param({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "text part", id="image"),
        pytest.param(
            {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens must be", id="max-0"
        ),
        pytest.param({"messages": [{"role": "user", "content": "x"}], "stop": [""]}, "stop must be", id="stop"),
        pytest.param(
            {
                "messages": [
                    {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]},
                    {"role": "user", "content": "x"},
                ]
            },
            "arguments is not JSON",
            id="tool-args",
        ),
    ],
)
def test_bad_requests_say_what_is_wrong(body: dict[str, Any], message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        parse_chat_request(body)


def test_sessions_and_calls_are_bounded(tokenizer: Any, scripted: Any) -> None:
    gateway = Gateway(
        scripted(lambda r: "ok"), tokenizer, limits=GatewayLimits(max_sessions=2, max_calls_per_session=2)
    )
    hello = [{"role": "user", "content": "hi"}]
    call(gateway, "a", hello)
    call(gateway, "b", hello)
    with pytest.raises(SessionLimit, match="max_sessions=2"):
        call(gateway, "c", hello)
    call(gateway, "a", hello)
    with pytest.raises(SessionLimit, match="max_calls_per_session"):
        call(gateway, "a", hello)
    gateway.finish("a", 1.0)
    with pytest.raises(SessionClosed, match="new session key"):
        call(gateway, "a", hello)
    with pytest.raises(NotFound):
        gateway.finish("a", 1.0)
    call(gateway, "c", hello)  # finishing freed a slot


def test_a_slow_engine_times_out(tokenizer: Any, scripted: Any) -> None:
    gateway = Gateway(scripted(lambda r: "ok", delay_s=30.0), tokenizer, limits=GatewayLimits(request_timeout_s=0.2))
    with pytest.raises(GenerateTimedOut, match=r"request_timeout_s=0\.2"):
        call(gateway, "a", [{"role": "user", "content": "hi"}])
    assert gateway.sessions["a"].calls == [] and gateway.sessions["a"].failed[0]["error"] == "GenerateTimedOut"


def test_a_call_that_gets_no_generation_slot_in_time_is_refused(tokenizer: Any, scripted: Any) -> None:
    limits = GatewayLimits(request_timeout_s=0.2, max_concurrent_generations=1)
    gateway = Gateway(scripted(lambda r: "ok"), tokenizer, limits=limits)

    async def while_the_slot_is_held() -> None:
        gateway._slots = asyncio.Semaphore(1)
        await gateway._slots.acquire()  # another call holds the one slot for longer than the timeout
        await gateway.complete("b", parse_chat_request({"messages": [{"role": "user", "content": "hi"}]}))

    with pytest.raises(GatewayOverloaded, match="max_concurrent_generations=1"):
        asyncio.run(while_the_slot_is_held())


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        pytest.param(Generation(token_ids=[10**6]), "outside", id="id-outside-vocab"),
        pytest.param(Generation(token_ids=[]), "0 ids", id="empty"),
        pytest.param(Generation(token_ids=[5, 6], logprobs=[0.0]), "logprobs", id="logprobs-length"),
        pytest.param(Generation(token_ids=[5], finish_reason="abort"), "'abort'", id="abort"),
        pytest.param(Generation(text="no ids"), "without token_ids", id="message-mode"),
        pytest.param(RuntimeError("engine died"), "RuntimeError", id="raises"),
    ],
)
def test_a_generate_function_breaking_its_contract_is_a_typed_error(tokenizer: Any, answer: Any, message: str) -> None:
    async def generate(request: Any) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer

    gateway = Gateway(generate, tokenizer)
    with pytest.raises(GenerateFailed, match=message):
        call(gateway, "s", [{"role": "user", "content": "hi"}])
    assert gateway.sessions["s"].failed[0]["error"] == "GenerateFailed"


def test_context_and_token_limits(tokenizer: Any, scripted: Any) -> None:
    limits = GatewayLimits(default_max_tokens=4, max_tokens_cap=8, max_context_tokens=64)
    gateway = Gateway(scripted(lambda r: "a long answer"), tokenizer, limits=limits)
    with pytest.raises(BadRequest, match="above the gateway's cap 8"):
        call(gateway, "s", [{"role": "user", "content": "hi"}], max_tokens=9)
    with pytest.raises(BadRequest, match="context_length_exceeded"):
        call(gateway, "s", [{"role": "user", "content": "word " * 100}])
    record = call(gateway, "s", [{"role": "user", "content": "hi"}])
    assert len(record.completion_ids) == 4


def test_finish_takes_a_reward_or_a_verifier(tokenizer: Any, scripted: Any) -> None:
    gateway = Gateway(scripted(lambda r: "42"), tokenizer)
    call(gateway, "s", [{"role": "user", "content": "6*7?"}])
    with pytest.raises(BadRequest, match="exactly one"):
        gateway.finish("s")
    episode = gateway.finish("s", verifier=lambda e: float(e.turns[-1].action.strip() == "42"))
    assert episode.total_reward == 1.0
