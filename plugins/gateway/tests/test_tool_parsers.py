"""Tool-call parsers by model family (Hermes/Qwen, Llama 3 JSON), chosen from the chat template with ``auto``."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.errors import ConfigError
from gem_core.testing_tokenizers import build_chat_tokenizer
from gem_gateway.capture import Gateway
from gem_gateway.server import run_in_thread
from gem_gateway.tool_parsers import ToolCall, family_of, get_parser, parse_hermes, parse_llama3_json

# A ChatML template that writes tool calls the Llama 3.1 way: the assistant message is the call's JSON,
# {"name": ..., "parameters": ...}, after <|python_tag|>; several joined by "; ". Results come as "ipython".
LLAMA3_STYLE = (
    '{%- if tools %}{{- \'<|im_start|>system\\nCall a function by answering <|python_tag|>{"name": function name, '
    '"parameters": dictionary of argument name and its value}\\n\' }}'
    "{%- for tool in tools %}{{- (tool | tojson) + '\\n' }}{%- endfor %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' and message.get('tool_calls') %}"
    "{{- '<|im_start|>assistant\\n<|python_tag|>' }}"
    "{%- for call in message['tool_calls'] %}{%- if not loop.first %}{{- '; ' }}{%- endif %}"
    "{{- {'name': call['function']['name'], 'parameters': call['function']['arguments']} | tojson }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}{{- '<|im_start|>ipython\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def tokenizer_with(template: str) -> Any:
    tokenizer = build_chat_tokenizer("chatml_tools")  # the scripted engine's vocabulary, another template
    tokenizer.chat_template = template
    return tokenizer


names = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True)
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
calls = st.lists(st.tuples(names, st.dictionaries(st.text(max_size=8), values, max_size=4)), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None)
@given(calls, st.booleans(), st.sampled_from(["; ", ";", " ; ", ";\n"]), st.booleans())
def test_llama3_json_reads_back_every_call_it_is_written_with(
    written: list[tuple[str, dict[str, Any]]], tag: bool, separator: str, arguments_key: bool
) -> None:
    key = "arguments" if arguments_key else "parameters"
    text = ("<|python_tag|>" if tag else "") + separator.join(json.dumps({"name": n, key: a}) for n, a in written)
    parsed = parse_llama3_json(text)
    assert parsed.tool_calls == tuple(ToolCall(n, a) for n, a in written)
    assert parsed.content == ""


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=40))
def test_llama3_json_leaves_prose_and_malformed_calls_as_content(text: str) -> None:
    parsed = parse_llama3_json(text)
    if parsed.tool_calls:  # only text made wholly of call objects parses
        assert text.strip().startswith(("{", "<|python_tag|>"))
    else:
        assert parsed.content == text


@pytest.mark.parametrize(
    "text",
    [
        'The answer is {"name": "add", "parameters": {}}',  # prose before: an answer, not a call
        '{"name": "add", "parameters": {"a": 1}} and then some words',  # words after the object
        '{"name": "add", "parameters": [1, 2]}',  # parameters not an object
        '{"name": "", "parameters": {}}',  # no name
        '{"name": "Ada", "age": 36}',  # a JSON answer with a "name" field
        '{"name": "add", "parameters": {"a": 1}',  # cut mid-object
        '{"name": "add", "parameters": "{not json"}',
    ],
    ids=["prose-first", "words-after", "list-params", "no-name", "json-answer", "cut", "bad-string-params"],
)
def test_llama3_json_refuses_what_is_not_a_call(text: str) -> None:
    assert parse_llama3_json(text).tool_calls == ()
    assert parse_llama3_json(text).content == text


@pytest.mark.parametrize(
    ("template", "family"),
    [
        ("chatml_tools", "hermes"),
        ("chatml", "hermes"),
        (LLAMA3_STYLE, "llama3_json"),
    ],
    ids=["qwen-style", "no-tools", "llama3-style"],
)
def test_auto_picks_the_family_of_the_chat_template(template: str, family: str) -> None:
    tokenizer = build_chat_tokenizer(template) if template in ("chatml", "chatml_tools") else tokenizer_with(template)
    assert family_of(tokenizer) == family
    assert get_parser("auto", tokenizer) is get_parser(family)


def test_auto_refuses_what_it_cannot_read_by_name() -> None:
    with pytest.raises(ConfigError, match="Mistral"):
        family_of(tokenizer_with("{{ '[TOOL_CALLS]' }}"))
    with pytest.raises(ConfigError, match="give the tokenizer"):
        get_parser("auto")
    with pytest.raises(ConfigError, match="'auto', 'hermes'"):
        get_parser("mistral")


def test_hermes_is_not_fooled_by_llama3_json_and_back() -> None:
    llama = '{"name": "add", "parameters": {"a": 1}}'
    hermes = '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'
    assert parse_hermes(llama).tool_calls == () and parse_llama3_json(hermes).tool_calls == ()


def test_the_openai_sdk_tool_loop_on_a_llama3_style_model(scripted: Any) -> None:
    """``tool_parser="auto"``: the SDK gets the call, sends the result, and the tokens stay exact."""
    tokenizer = tokenizer_with(LLAMA3_STYLE)
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    replies = iter(['{"name": "add", "parameters": {"a": 2, "b": 3}}', "2+3 = 5"])
    engine = scripted(lambda request: next(replies), char_ids=False)
    gateway = Gateway(engine, tokenizer, tool_parser="auto")
    with run_in_thread(gateway) as url:
        sdk = openai.OpenAI(base_url=f"{url}/s/llama/v1", api_key="unused", max_retries=0, timeout=60)
        messages: list[Any] = [{"role": "user", "content": "What is 2+3?"}]
        first = sdk.chat.completions.create(model="m", messages=messages, tools=tools).choices[0]
        assert first.finish_reason == "tool_calls" and first.message.content is None
        (call,) = first.message.tool_calls or []
        assert (call.function.name, json.loads(call.function.arguments)) == ("add", {"a": 2, "b": 3})
        messages += [first.message.model_dump(exclude_none=True)]
        messages += [{"role": "tool", "tool_call_id": call.id, "content": "5"}]
        second = sdk.chat.completions.create(model="m", messages=messages, tools=tools).choices[0]
        sdk.close()
    assert second.message.content == "2+3 = 5"
    episode = gateway.finish("llama", 1.0)
    assert episode.metadata["branch_points"] == []  # the echoed call extends the first call's tokens
    assert [(list(t.prompt_token_ids), t.action_token_ids) for t in episode.turns] == engine.seen
