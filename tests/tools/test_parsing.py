from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest

from gem_core.errors import ToolCallParseError
from gem_core.testing import FUZZ_ACTIONS
from gem_core.tools import MalformedCall, Tool, ToolCall, ToolResult, parse_tool_calls


class CodeTool(Tool):
    name: ClassVar[str] = "python"
    description: ClassVar[str] = "Run code."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"code": {"type": "string"}}}
    tag_argument: ClassVar[str | None] = "code"

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(output=str(arguments))


class SearchTool(CodeTool):
    name: ClassVar[str] = "search"
    tag_argument: ClassVar[str | None] = "query"


class JsonOnlyTool(CodeTool):
    name: ClassVar[str] = "weather"
    tag_argument: ClassVar[str | None] = None


TOOLS = [CodeTool(), SearchTool(), JsonOnlyTool()]


def call(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_tag_call_content_becomes_the_tag_argument() -> None:
    text = "Let me compute.\n<python>\nprint(6 * 7)\n</python>\nThen answer."
    parsed = parse_tool_calls(text, TOOLS)
    assert parsed.errors == []
    [c] = parsed.calls
    assert (c.name, c.arguments, c.syntax) == ("python", {"code": "print(6 * 7)"}, "tag")
    assert text[c.span[0] : c.span[1]] == c.raw == "<python>\nprint(6 * 7)\n</python>"


def test_json_call_with_object_and_with_string_arguments() -> None:
    as_string = '<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"paris\\"}"}</tool_call>'
    parsed = parse_tool_calls(call("python", code="print(1)") + " and " + as_string, TOOLS)
    assert [(c.name, c.arguments, c.syntax) for c in parsed.calls] == [
        ("python", {"code": "print(1)"}, "json"),
        ("search", {"query": "paris"}, "json"),
    ]


def test_several_calls_in_both_syntaxes_come_back_in_order() -> None:
    text = "<search>eiffel</search> x " + call("weather", city="Paris") + " y <python>1</python>"
    parsed = parse_tool_calls(text, TOOLS)
    assert [c.name for c in parsed.calls] == ["search", "weather", "python"]
    assert [c.span[0] for c in parsed.calls] == sorted(c.span[0] for c in parsed.calls)


@pytest.mark.parametrize(
    ("syntax", "expected"),
    [("tag", ["python"]), ("json", ["search"]), ("both", ["python", "search"])],
    ids=["tag-only", "json-only", "both"],
)
def test_syntax_selects_what_is_recognised(syntax: str, expected: list[str]) -> None:
    text = "<python>1</python>" + call("search", query="q")
    assert [c.name for c in parse_tool_calls(text, TOOLS, syntax=syntax).calls] == expected  # type: ignore[arg-type]


def test_tool_without_tag_argument_has_no_tag_syntax() -> None:
    assert not parse_tool_calls("<weather>Paris</weather>", TOOLS)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('<tool_call>{"name": "python", "arguments": {"code": "x"</tool_call>', "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "must be a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'has no "name"'),
        ('<tool_call>{"name": "shell", "arguments": {}}</tool_call>', "unknown tool 'shell'; available tools: python"),
        ('<tool_call>{"name": "python", "arguments": [1]}</tool_call>', "must be a JSON object, got list"),
        ('<tool_call>{"name": "python", "arguments": "{oops"}</tool_call>', "is a string that is not valid JSON"),
    ],
    ids=["truncated-json", "not-object", "no-name", "unknown-tool", "arguments-list", "arguments-bad-string"],
)
def test_malformed_json_calls_become_errors_for_the_model(text: str, fragment: str) -> None:
    parsed = parse_tool_calls("before " + text + " after", TOOLS)
    assert parsed.calls == []
    [err] = parsed.errors
    assert isinstance(err, MalformedCall)
    assert fragment in err.message
    assert err.raw == text
    with pytest.raises(ToolCallParseError, match="malformed tool call at offset 7"):
        parsed.raise_for_errors()


def test_unclosed_call_at_the_end_is_accepted_when_allowed() -> None:
    # Inference servers drop the stop sequence, so "</python>" is often missing at the end.
    parsed = parse_tool_calls("Compute: <python>print(2)", TOOLS)
    assert [c.arguments for c in parsed.calls] == [{"code": "print(2)"}]
    strict = parse_tool_calls("Compute: <python>print(2)", TOOLS, allow_unclosed=False)
    assert strict.calls == []
    assert [e.message for e in strict.errors] == ["unclosed <python>: end the call with </python>"]


def test_unclosed_json_call_is_parsed_to_the_end() -> None:
    parsed = parse_tool_calls('<tool_call>{"name": "search", "arguments": {"query": "q"}}', TOOLS)
    assert [(c.name, c.arguments) for c in parsed.calls] == [("search", {"query": "q"})]


def test_tags_inside_a_json_call_are_not_separate_calls() -> None:
    text = call("python", code="s = '<search>x</search>'")
    parsed = parse_tool_calls(text, TOOLS)
    assert [c.name for c in parsed.calls] == ["python"]
    assert parsed.calls[0].arguments == {"code": "s = '<search>x</search>'"}


def test_tools_by_mapping_and_items_merge_calls_and_errors() -> None:
    parsed = parse_tool_calls("<tool_call>{}</tool_call><python>1</python>", {"python": CodeTool()})
    assert [type(i).__name__ for i in parsed.items] == ["MalformedCall", "ToolCall"]
    assert bool(parsed)


@pytest.mark.parametrize("text", FUZZ_ACTIONS, ids=range(len(FUZZ_ACTIONS)))
def test_fuzz_never_raises(text: str) -> None:
    parsed = parse_tool_calls(text, TOOLS)
    for item in parsed.items:
        assert isinstance(item, (ToolCall, MalformedCall))
