"""Per-token streaming: deltas sent as the engine samples, the record still token exact, bounded.

The streaming engines here are scripted async iterators (what is tested is the gateway's
streaming path, not a model), except the last tests: a real transformers model (a tiny Qwen2
from a config) sampled token by token by :class:`gem_gateway.streaming.TransformersStreamer`.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlparse

import openai
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gem_core.episode import Generation, TurnRequest
from gem_gateway.capture import Gateway, GatewayLimits, TokenDelta, parse_chat_request
from gem_gateway.server import run_in_thread

QUESTION = [{"role": "user", "content": "Say hello."}]
PIECES = ["a", "b", " ", "c", "c c", "\n", "\n\n", "é"]
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]


def char_ids(tokenizer: Any, text: str) -> list[int]:
    """One id per character (a sampling model's non-canonical tokenisation), then eos."""
    return [*(i for ch in text for i in tokenizer.encode(ch, add_special_tokens=False)), tokenizer.eos_token_id]


class Gated:
    """A streaming engine: ``ids`` in deltas of ``chunk``; after ``open_for`` ids it waits for ``gate``.

    ``closed`` is set when its stream ends (done, closed early or cancelled): the engine's request ended.
    """

    def __init__(self, ids: list[int], *, chunk: int = 1, open_for: int | None = None, forever: bool = False) -> None:
        self.ids, self.chunk, self.open_for, self.forever = ids, chunk, open_for, forever
        self.gate = threading.Event()
        self.closed = threading.Event()
        self.sent: list[int] = []

    async def __call__(self, request: TurnRequest) -> AsyncIterator[TokenDelta]:
        try:
            at = 0
            while at < len(self.ids) or self.forever:
                if self.open_for is not None and at >= self.open_for:
                    while not self.gate.is_set():  # polled: the gate is set from the test's thread
                        await asyncio.sleep(0.01)
                piece = self.ids[at : at + self.chunk] if at < len(self.ids) else self.ids[:1]
                at += len(piece)
                self.sent.extend(piece)
                last = at >= len(self.ids) and not self.forever
                yield TokenDelta(piece, [-0.5] * len(piece), "stop" if last else None)
        finally:
            self.closed.set()


@pytest.fixture
def gated_gateway(tokenizer: Any) -> Iterator[tuple[Any, Any]]:
    def make(engine: Gated, **limits: Any) -> tuple[Gateway, Any]:
        async def whole(request: TurnRequest) -> Generation:
            raise AssertionError("a streaming call must not use the whole-reply generate function")

        gateway = Gateway(whole, tokenizer, model_name="tiny", limits=GatewayLimits(**limits), stream_generate=engine)
        return gateway, run_in_thread(gateway)

    yield make, tokenizer


def sdk(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/s/{key}/v1", api_key="unused", max_retries=0, timeout=60)


def test_text_chunks_arrive_before_the_reply_ends(gated_gateway: tuple[Any, Any]) -> None:
    make, tokenizer = gated_gateway
    text = "Hello there, streaming world."
    engine = Gated(char_ids(tokenizer, text), open_for=6)
    gateway, serving = make(engine)
    with serving as url:
        stream = sdk(url, "live").chat.completions.create(model="tiny", messages=QUESTION, stream=True, logprobs=True)
        received: list[str] = []
        for chunk in stream:
            piece = chunk.choices[0].delta.content if chunk.choices else None
            if piece:
                received.append(piece)
                engine.gate.set()  # the engine goes on only once a delta has reached the client
            if chunk.choices and chunk.choices[0].finish_reason:
                finish, logprobs = chunk.choices[0].finish_reason, chunk.choices[0].logprobs
    record = gateway.sessions["live"].calls[0]
    assert len(received) > 1 and "".join(received) == text
    assert record.completion_ids == engine.sent and record.text == text
    assert finish == "stop" and logprobs is not None and len(logprobs.content) == len(engine.sent)


def test_a_client_that_goes_away_ends_the_engine_request(gated_gateway: tuple[Any, Any]) -> None:
    make, tokenizer = gated_gateway
    engine = Gated(char_ids(tokenizer, "ab"), forever=True)  # never ends by itself
    gateway, serving = make(engine, max_tokens_cap=10**6, max_context_tokens=2 * 10**6, default_max_tokens=10**6)
    with serving as url:
        where = urlparse(url)
        body = json.dumps({"model": "tiny", "messages": QUESTION, "stream": True}).encode()
        with socket.create_connection((where.hostname, where.port), timeout=30) as conn:
            conn.sendall(
                b"POST /s/gone/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            seen = b""
            while b'"content": "a"' not in seen and len(seen) < 65536:  # a delta came, then the client leaves
                got = conn.recv(4096)
                assert got, "the gateway closed the stream"
                seen += got
        assert engine.closed.wait(60), "the engine's stream was not closed after the client left"
        session = gateway.sessions["gone"]
        assert session.calls == [] and [f["call"] for f in session.failed] == [0]


def test_a_stalled_engine_is_a_timeout_and_its_request_ends(gated_gateway: tuple[Any, Any]) -> None:
    make, tokenizer = gated_gateway
    engine = Gated(char_ids(tokenizer, "abc"), open_for=0)  # waits for a gate nobody opens
    gateway, serving = make(engine, request_timeout_s=0.5)
    with serving as url, pytest.raises(openai.APIStatusError) as caught:
        sdk(url, "stall").chat.completions.create(model="tiny", messages=QUESTION, stream=True)
    assert caught.value.status_code == 504
    assert engine.closed.wait(60)
    assert gateway.sessions["stall"].failed[0]["error"] == "GenerateTimedOut"


def test_tool_calls_stream_as_calls_not_as_text(gated_gateway: tuple[Any, Any]) -> None:
    make, tokenizer = gated_gateway
    engine = Gated(char_ids(tokenizer, 'ok\n<tool_call>\n{"name": "add", "arguments": {}}\n</tool_call>'), chunk=3)
    gateway, serving = make(engine)
    with serving as url:
        chunks = list(
            sdk(url, "tools").chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS, stream=True)
        )
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [t.function.name for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or ()]
    assert (content, calls) == ("ok", ["add"])
    assert gateway.sessions["tools"].calls[0].finish_reason == "tool_calls"


async def _both(tokenizer: Any, ids: list[int], chunk: int, stop: list[str], max_tokens: int) -> tuple[Any, ...]:
    async def whole(request: TurnRequest) -> Generation:
        kept = ids[:max_tokens]
        return Generation(kept, logprobs=[-0.5] * len(kept), finish_reason="length" if kept != ids else "stop")

    body = {"messages": QUESTION, "stop": stop or None, "max_tokens": max_tokens}
    streaming = Gateway(whole, tokenizer, stream_generate=Gated(ids, chunk=chunk))
    deltas: list[str] = []
    record = None
    async for event in streaming.complete_stream("k", parse_chat_request({**body, "stream": True})):
        if isinstance(event, str):
            deltas.append(event)
        else:
            record = event
    plain = await Gateway(whole, tokenizer).complete("k", parse_chat_request(body))
    return deltas, record, plain


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    # pieces that often make (and half make) the stop strings, so text must be held back across deltas
    text=st.lists(st.sampled_from(PIECES), min_size=1, max_size=12).map("".join),
    chunk=st.integers(1, 5),
    stop=st.lists(st.sampled_from(["b", "c c", "\n\n", "é", "zz"]), max_size=2, unique=True),
    max_tokens=st.one_of(st.just(64), st.integers(1, 30)),
)
@example(text="ac c", chunk=1, stop=["c c"], max_tokens=64)  # a stop string completed over three deltas
@example(text="a", chunk=2, stop=[], max_tokens=1)  # a delta that crosses the token limit
def test_the_streamed_text_is_the_recorded_reply_for_any_chunking_and_stop(
    tokenizer: Any, text: str, chunk: int, stop: list[str], max_tokens: int
) -> None:
    """The deltas joined are the reply, and the record equals the non-streaming call's (ids, text, finish)."""
    deltas, record, plain = asyncio.run(_both(tokenizer, char_ids(tokenizer, text), chunk, stop, max_tokens))
    assert "".join(deltas) == record.reply["content"] == plain.reply["content"]
    assert record.completion_ids == plain.completion_ids and record.logprobs == plain.logprobs
    assert record.finish_reason == plain.finish_reason
    for s in stop:  # no delta ever showed text past a stop string
        assert s not in "".join(deltas)


@pytest.fixture(scope="module")
def tiny_model() -> Any:
    torch = pytest.importorskip("torch", reason="the packages tox env installs torch (CPU)")
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from gem_core.testing_tokenizers import build_chat_tokenizer

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(build_chat_tokenizer("chatml_tools")),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
    )
    return Qwen2ForCausalLM(config)


def test_a_real_model_streams_token_exact(tokenizer: Any, tiny_model: Any) -> None:
    from gem_gateway.streaming import TransformersStreamer

    engine = TransformersStreamer(tiny_model, [tokenizer.eos_token_id], temperature=1.0, seed=3, max_tokens=24)
    seen: list[list[int]] = []

    def recorded(request: TurnRequest) -> AsyncIterator[TokenDelta]:
        async def deltas() -> AsyncIterator[TokenDelta]:
            ids: list[int] = []
            seen.append(ids)  # the engine's own record of what it streamed
            async for delta in engine(request):
                ids.extend(delta.token_ids)
                yield delta

        return deltas()

    gateway = Gateway(engine.generate, tokenizer, tool_parser="none", stream_generate=recorded)
    with run_in_thread(gateway) as url:
        chunks = list(sdk(url, "hf").chat.completions.create(model="tiny", messages=QUESTION, stream=True))
        whole = sdk(url, "hf-whole").chat.completions.create(model="tiny", messages=QUESTION)
    streamed = gateway.sessions["hf"].calls[0]
    assert streamed.completion_ids == seen[0] and len(seen[0]) > 1
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 1
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == streamed.text
    # the same sampler answers whole replies with the same ids (same seed, same turn)
    assert gateway.sessions["hf-whole"].calls[0].completion_ids == streamed.completion_ids
    assert whole.choices[0].message.content == streamed.text
    assert engine.running == 0


def test_closing_a_real_model_stream_stops_its_sampling_thread(tokenizer: Any, tiny_model: Any) -> None:
    from gem_gateway.streaming import TransformersStreamer

    # no stop id the model will draw in time: only closing the stream ends it early
    engine = TransformersStreamer(tiny_model, [len(tokenizer) + 1], temperature=1.0, max_tokens=10**5)
    request = TurnRequest(0, 0, tokenizer.encode("hi"), [], 10**5)

    async def two_then_close() -> int:
        stream = engine(request)
        got = [await stream.__anext__(), await stream.__anext__()]
        await stream.aclose()
        return len(got)

    assert asyncio.run(two_then_close()) == 2
    for _ in range(600):  # bounded wait for the worker thread (at most one more model step)
        if engine.running == 0:
            break
        threading.Event().wait(0.05)
    assert engine.running == 0


def test_a_streamer_refuses_bad_settings(tiny_model: Any) -> None:
    from gem_gateway.errors import BadRequest
    from gem_gateway.streaming import TransformersStreamer

    for kwargs in ({"temperature": -1.0}, {"top_p": 0.0}, {"max_tokens": 0}):
        with pytest.raises(BadRequest):
            TransformersStreamer(tiny_model, [0], **kwargs)
    with pytest.raises(BadRequest, match="stop id"):
        TransformersStreamer(tiny_model, [])
