"""Model text never crashes parsing or a tool step: every bad call becomes an error for that call only."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings

from gem_core.errors import InvalidAction
from gem_core.testing import GenericTestEnv
from gem_core.tools import Tool, ToolEnvWrapper, ToolResult, parse_tool_calls
from gem_core.tools.fuzz import HOSTILE_JSON, any_text, model_text
from gem_core.tools.safety import MAX_NESTING, UnsafeValue, clean_arguments, clean_text, loads_model_json


class RecordingTool(Tool):
    """Echoes its arguments as JSON, so the test sees exactly what a tool received."""

    name: ClassVar[str] = "python"
    description: ClassVar[str] = "Runs code."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"code": {"type": "string"}}}
    tag_argument: ClassVar[str | None] = "code"

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(output=json.dumps(arguments, allow_nan=False)[:200])


class CrashingTool(RecordingTool):
    """A tool with a bug: it raises for every call."""

    name: ClassVar[str] = "search"
    tag_argument: ClassVar[str | None] = "query"

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        raise KeyError("a bug in the tool")


def wrapped() -> ToolEnvWrapper:
    env = ToolEnvWrapper(GenericTestEnv(), [RecordingTool(), CrashingTool()], max_tool_calls=10**6)
    env.reset(seed=0)
    return env


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param(
            '{"name": "python", "arguments": ' + "[" * 100_000 + "]" * 100_000 + "}", "levels deep", id="deep"
        ),
        pytest.param(
            '{"name": "python", "arguments": {"code": ' + "9" * 5_000 + "}}", "cannot be decoded", id="huge-int"
        ),
        pytest.param('{"name": "python", "arguments": {"code": NaN}}', "NaN is not valid JSON", id="nan"),
        pytest.param('{"name": "python", "arguments": "' + "[" * 200 + '"}', "levels deep", id="deep-string-arguments"),
        pytest.param("[" * 100_000, "levels deep", id="unbalanced"),
    ],
)
def test_undecodable_json_calls_are_malformed_calls_naming_the_problem(text: str, fragment: str) -> None:
    parsed = parse_tool_calls(f"<tool_call>{text}</tool_call>", [RecordingTool()])
    assert parsed.calls == []
    [error] = parsed.errors
    assert fragment in error.message


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('<tool_call>{"name": "python", "arguments": {"code": "\\ud800x"}}</tool_call>', id="json-escape"),
        pytest.param("<python>print('\ud800')</python>", id="tag-raw"),
        pytest.param('<tool_call>{"name": "python", "arguments": {"\\udfff": "y"}}</tool_call>', id="key"),
    ],
)
def test_lone_surrogates_become_replacement_characters(text: str) -> None:
    [call] = parse_tool_calls(text, [RecordingTool()]).calls
    encoded = json.dumps(call.arguments, ensure_ascii=False).encode("utf-8")  # would raise on a surrogate
    assert "\ufffd".encode() in encoded


def test_clean_arguments_bounds_depth_and_numbers_and_copies_the_rest() -> None:
    deep: Any = 1
    for _ in range(100_000):  # far past the recursion limit: the check is iterative
        deep = [deep]
    with pytest.raises(UnsafeValue, match=f"{MAX_NESTING} levels"):
        clean_arguments({"a": deep})
    with pytest.raises(UnsafeValue, match="non-finite"):
        clean_arguments({"a": [float("nan")]})
    with pytest.raises(UnsafeValue, match="4000 digits"):
        clean_arguments({"a": 10**5000})
    with pytest.raises(UnsafeValue, match="not a JSON value"):
        clean_arguments({"a": object()})
    value = {"k\ud800": ["x\udfff", 1, 2.5, None, True, {"n": (1, 2)}]}
    assert clean_arguments(value) == {"k\ufffd": ["x\ufffd", 1, 2.5, None, True, {"n": [1, 2]}]}


@pytest.mark.parametrize("text", HOSTILE_JSON, ids=range(len(HOSTILE_JSON)))
def test_loads_model_json_raises_only_unsafe_value(text: str) -> None:
    try:
        value = loads_model_json(text)
    except UnsafeValue:
        return
    json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")


@settings(max_examples=150, deadline=None)
@given(model_text(["python", "search"]))
def test_parsing_never_raises_and_arguments_always_encode(text: str) -> None:
    parsed = parse_tool_calls(text, [RecordingTool(), CrashingTool()])
    for call in parsed.calls:
        json.dumps(call.arguments, allow_nan=False, ensure_ascii=False).encode("utf-8")
    for error in parsed.errors:
        error.message.encode("utf-8")


@settings(max_examples=100, deadline=None)
@given(model_text(["python", "search"]))
def test_step_never_raises_and_the_observation_encodes(text: str) -> None:
    env = wrapped()
    obs, *_, info = env.step(text)
    if info["tool_calls"]:  # a tool step's observation (the inner env's own echo is its business)
        obs.encode("utf-8")
    env.close()


def test_a_tool_that_raises_fails_that_call_only() -> None:
    env = wrapped()
    obs, _, _, _, info = env.step("<search>x</search><python>print(1)</python>")
    assert "the search tool failed: KeyError" in obs and '{"code": "print(1)"}' in obs
    assert [r["ok"] for r in info["tool_results"]] == [False, True]


@pytest.mark.parametrize("action", [None, 3, b"<python>1</python>", ["<python>1</python>"]], ids=repr)
def test_a_non_string_action_is_refused_before_the_turn_counts(action: Any) -> None:
    env = wrapped()
    with pytest.raises(InvalidAction, match="must be the model's response as a str"):
        env.step(action)
    assert env.calls_used == 0 and env.turn_calls == []


@given(any_text())
def test_clean_text_always_encodes(text: str) -> None:
    cleaned = clean_text(text)
    cleaned.encode("utf-8")
    assert len(cleaned) == len(text)
