"""The HTTP API through the real ``openai`` SDK (and raw HTTP for what an SDK never sends), on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from gem_gateway.capture import Gateway, GatewayLimits
from gem_gateway.server import run_in_thread

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
CALL = 'Adding.\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
ADMIN = "s3cret-admin-token"


@pytest.fixture
def served(tokenizer: Any, scripted: Any) -> Iterator[tuple[Gateway, str]]:
    def reply(request: Any) -> str:
        return CALL if request.turn == 0 else "The sum is 5."

    limits = GatewayLimits(max_sessions=4, max_body_bytes=4096)
    gateway = Gateway(scripted(reply), tokenizer, model_name="tiny", limits=limits)
    with run_in_thread(gateway, admin_token=ADMIN) as url:
        yield gateway, url


def client(url: str, session: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/s/{session}/v1", api_key="unused", max_retries=0, timeout=30)


def test_the_sdk_tool_loop_and_its_episode(served: tuple[Gateway, str]) -> None:
    gateway, url = served
    sdk = client(url, "ep1")
    messages: list[Any] = [{"role": "user", "content": "What is 2+3?"}]
    first = sdk.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, logprobs=True)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Adding."
    (tool_call,) = choice.message.tool_calls
    assert tool_call.function.name == "add" and json.loads(tool_call.function.arguments) == {"a": 2, "b": 3}
    assert [c.logprob for c in choice.logprobs.content] == [-0.25] * first.usage.completion_tokens
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": tool_call.id, "content": "5"},
    ]
    second = sdk.chat.completions.create(model="tiny", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "The sum is 5." and second.choices[0].finish_reason == "stop"
    assert [m.id for m in sdk.models.list().data] == ["tiny"]
    episode = gateway.finish("ep1", 1.0)
    assert episode.metadata["branch_points"] == [] and episode.num_turns == 2
    prompt = list(episode.turns[1].prompt_token_ids)
    assert prompt[: len(episode.turns[0].prompt_token_ids)] == list(episode.turns[0].prompt_token_ids)


def test_streaming_gives_the_same_answer_as_one_response(served: tuple[Gateway, str]) -> None:
    gateway, url = served
    sdk = client(url, "stream")
    messages: list[Any] = [{"role": "user", "content": "What is 2+3?"}]
    chunks = list(
        sdk.chat.completions.create(
            model="tiny", messages=messages, tools=TOOLS, stream=True, stream_options={"include_usage": True}
        )
    )
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or ()]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    usage = [c.usage for c in chunks if c.usage]
    record = gateway.sessions["stream"].calls[0]
    assert content == "Adding."
    assert [(t.function.name, json.loads(t.function.arguments)) for t in calls] == [("add", {"a": 2, "b": 3})]
    assert finish == ["tool_calls"]
    assert usage[0].completion_tokens == len(record.completion_ids)
    assert usage[0].prompt_tokens == len(record.prompt_ids)


@pytest.mark.parametrize(
    ("send", "error", "status"),
    [
        pytest.param(
            lambda sdk: sdk.chat.completions.create(model="t", messages=[]), openai.BadRequestError, 400, id="empty"
        ),
        pytest.param(
            lambda sdk: sdk.chat.completions.create(model="t", messages=[{"role": "user", "content": "x"}], n=3),
            openai.BadRequestError,
            400,
            id="n",
        ),
        pytest.param(
            lambda sdk: sdk.chat.completions.create(model="t", messages=[{"role": "user", "content": "x" * 5000}]),
            openai.APIStatusError,
            413,
            id="body-too-large",
        ),
    ],
)
def test_refusals_reach_the_sdk_as_its_typed_errors(
    served: tuple[Gateway, str], send: Any, error: type[Exception], status: int
) -> None:
    _, url = served
    with pytest.raises(error) as caught:
        send(client(url, "bad"))
    assert caught.value.status_code == status
    assert caught.value.body["code"] in {"BadRequest"}


def test_a_base_url_without_a_session_is_told_how_to_set_one(served: tuple[Gateway, str]) -> None:
    _, url = served
    sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="/s/<session>/v1"):
        sdk.chat.completions.create(model="t", messages=[{"role": "user", "content": "x"}])


def test_too_many_sessions_is_a_rate_limit(served: tuple[Gateway, str]) -> None:
    gateway, url = served
    hello = [{"role": "user", "content": "hi"}]
    for key in ("a", "b", "c", "d"):
        client(url, key).chat.completions.create(model="t", messages=hello)
    with pytest.raises(openai.RateLimitError, match="max_sessions=4"):
        client(url, "e").chat.completions.create(model="t", messages=hello)
    assert sorted(gateway.sessions) == ["a", "b", "c", "d"]


# --------------------------------------------------------------------------- forging the reward


def test_a_harness_cannot_set_its_own_reward(served: tuple[Gateway, str]) -> None:
    """The harness is an adversary: a reward field in its calls, admin calls without or with a wrong
    token, and calls after the trainer finished the episode all fail to change the recorded reward."""
    gateway, url = served
    sdk = client(url, "forge")
    sdk.chat.completions.create(
        model="t", messages=[{"role": "user", "content": "hi"}], extra_body={"reward": 100.0, "metadata": {"r": 1}}
    )
    with httpx.Client(base_url=url, timeout=10) as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {ADMIN}x"}):
            answer = http.post("/admin/sessions/forge/finish", json={"reward": 100.0}, headers=headers)
            assert answer.status_code == 401 and answer.json()["error"]["code"] == "Unauthorized"
        assert http.get("/admin/sessions/forge").status_code == 401
        assert "forge" in gateway.sessions
        trainer = {"Authorization": f"Bearer {ADMIN}"}
        shown = http.get("/admin/sessions/forge", headers=trainer).json()
        assert shown["turns"][-1]["reward"] == 0.0
        finished = http.post("/admin/sessions/forge/finish", json={"reward": 0.25}, headers=trainer).json()
        assert finished["turns"][-1]["reward"] == 0.25
        again = http.post("/admin/sessions/forge/finish", json={"reward": 100.0}, headers=trainer)
        assert again.status_code == 404
    with pytest.raises(openai.ConflictError, match="finished"):
        sdk.chat.completions.create(model="t", messages=[{"role": "user", "content": "hi"}])


def test_admin_routes_are_off_without_a_token(tokenizer: Any, scripted: Any) -> None:
    gateway = Gateway(scripted(lambda r: "ok"), tokenizer)
    with run_in_thread(gateway) as url, httpx.Client(base_url=url) as http:
        client(url, "s").chat.completions.create(model="t", messages=[{"role": "user", "content": "hi"}])
        answer = http.post(
            "/admin/sessions/s/finish", json={"reward": 1.0}, headers={"Authorization": "Bearer anything"}
        )
        assert answer.status_code == 401 and "admin routes are off" in answer.json()["error"]["message"]
