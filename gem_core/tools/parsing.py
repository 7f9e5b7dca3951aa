"""Finding tool calls in a model's response.

Two syntaxes are understood, in any mix and any number per response:

* **Tags** (GEM's): ``<python>print(1)</python>``, ``<search>capital of France</search>``.
  The tag is the tool's name; its content becomes the tool's :attr:`~gem_core.tools.Tool.tag_argument`.
* **JSON function calls** (what Qwen and Hermes chat templates emit):
  ``<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>``;
  ``arguments`` may also be a JSON-encoded string, as in OpenAI's API.

A call that cannot be understood (bad JSON, unknown tool, missing name) becomes a
:class:`MalformedCall` whose ``message`` tells the model what was wrong; the tool wrapper
sends it back instead of silently ignoring the call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gem_core.errors import ToolCallParseError
from gem_core.tools.base import Tool, ToolCall
from gem_core.tools.safety import UnsafeValue, clean_text, loads_model_json

__all__ = ["MalformedCall", "ParsedResponse", "Syntax", "parse_tool_calls"]

#: Which call syntaxes to look for.
Syntax = Literal["tag", "json", "both"]

_JSON_OPEN, _JSON_CLOSE = "<tool_call>", "</tool_call>"


class MalformedCall(BaseModel):
    """A tool call that was recognised but could not be understood.

    Attributes:
        message: What was wrong and how to write it, for the model.
        raw: The text of the call.
        span: ``(start, end)`` offsets of ``raw`` in the response.
        name: The tool's name, when it could be read.
        syntax: The syntax the call was written in.
    """

    model_config = ConfigDict(frozen=True)

    message: str
    raw: str = ""
    span: tuple[int, int] = (0, 0)
    name: str | None = None
    syntax: Literal["tag", "json"] = "json"


@dataclass
class ParsedResponse:
    """The calls found in one response, in order of appearance.

    Attributes:
        calls: Well-formed calls.
        errors: Malformed calls.
    """

    calls: list[ToolCall] = field(default_factory=list)
    errors: list[MalformedCall] = field(default_factory=list)

    @property
    def items(self) -> list[ToolCall | MalformedCall]:
        """Calls and malformed calls together, sorted by position."""
        return sorted([*self.calls, *self.errors], key=lambda item: item.span[0])

    def __bool__(self) -> bool:
        return bool(self.calls or self.errors)

    def raise_for_errors(self) -> None:
        """Raise :class:`~gem_core.errors.ToolCallParseError` for the first malformed call, if any."""
        if self.errors:
            first = self.errors[0]
            raise ToolCallParseError(f"malformed tool call at offset {first.span[0]}: {first.message}")


def _tool_table(tools: Mapping[str, Tool] | Iterable[Tool]) -> dict[str, Tool]:
    if isinstance(tools, Mapping):
        return dict(tools)
    return {tool.name: tool for tool in tools}


def _find_blocks(text: str, open_tag: str, close_tag: str, allow_unclosed: bool) -> list[tuple[int, int, str, bool]]:
    """``(start, end, inner, closed)`` of each ``open_tag ... close_tag`` block.

    An unclosed block at the end of the text runs to the end (generation often stops on the
    closing tag, which inference servers drop from the output) when ``allow_unclosed``.
    """
    blocks: list[tuple[int, int, str, bool]] = []
    pos = 0
    while True:
        start = text.find(open_tag, pos)
        if start < 0:
            return blocks
        inner_start = start + len(open_tag)
        end = text.find(close_tag, inner_start)
        if end < 0:
            if allow_unclosed:
                blocks.append((start, len(text), text[inner_start:], False))
            else:
                blocks.append((start, len(text), "", False))
            return blocks
        blocks.append((start, end + len(close_tag), text[inner_start:end], True))
        pos = end + len(close_tag)


def _parse_json_call(inner: str, tools: dict[str, Tool]) -> tuple[str, dict[str, Any]] | tuple[str | None, str]:
    """``(name, arguments)`` or ``(name_or_None, error message)``; total over any text."""
    example = '<tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>'
    try:
        payload = loads_model_json(inner)
    except UnsafeValue as exc:
        return None, f"{exc}; write {example}"
    if not isinstance(payload, dict):
        return None, f"the tool call must be a JSON object, got {type(payload).__name__}; write {example}"
    name = payload.get("name")
    if not isinstance(name, str) or not name:
        return None, f'the tool call has no "name"; write {example}'
    if name not in tools:
        shown = name if len(name) <= 80 else name[:80] + "..."
        return name[:200], f"unknown tool {shown!r}; available tools: {', '.join(sorted(tools)) or 'none'}"
    arguments: Any = payload.get("arguments", payload.get("parameters", {}))
    if isinstance(arguments, str):  # OpenAI style: arguments as a JSON-encoded string
        try:
            arguments = (
                loads_model_json(arguments, what=f'"arguments" of {name!r} is a string that')
                if arguments.strip()
                else {}
            )
        except UnsafeValue as exc:
            return name, f"{exc}; write the arguments as a JSON object"
    if not isinstance(arguments, dict):
        return name, f'"arguments" of {name!r} must be a JSON object, got {type(arguments).__name__}'
    return name, arguments


def parse_tool_calls(
    text: str,
    tools: Mapping[str, Tool] | Iterable[Tool],
    *,
    syntax: Syntax = "both",
    allow_unclosed: bool = True,
) -> ParsedResponse:
    """Find every tool call in ``text``.

    Args:
        text: The model's response.
        tools: The callable tools (by name, or a list of tools).
        syntax: ``"tag"``, ``"json"`` or ``"both"``.
        allow_unclosed: Accept a call whose closing tag is missing at the very end of the
            response (stop sequences usually cut it off); otherwise that is a malformed call.

    Returns:
        The well-formed calls and the malformed ones, each in order of appearance. Calls nested
        inside an earlier call (say ``<python>`` text inside a JSON call's code) are not separate calls.
    """
    table = _tool_table(tools)
    found: list[ToolCall | MalformedCall] = []
    if syntax in ("json", "both"):
        for start, end, inner, closed in _find_blocks(text, _JSON_OPEN, _JSON_CLOSE, allow_unclosed):
            raw = text[start:end]
            if not closed and not allow_unclosed:
                message = f"unclosed {_JSON_OPEN}: end the call with {_JSON_CLOSE}"
                found.append(MalformedCall(message=message, raw=raw, span=(start, end)))
                continue
            name, parsed = _parse_json_call(inner.strip(), table)
            if isinstance(parsed, dict):
                assert name is not None
                found.append(ToolCall(name=name, arguments=parsed, raw=raw, syntax="json", span=(start, end)))
            else:
                found.append(MalformedCall(message=parsed, raw=raw, span=(start, end), name=name, syntax="json"))
    if syntax in ("tag", "both"):
        for tool_name, tool in table.items():
            if not tool.tag_argument:
                continue
            open_tag, close_tag = f"<{tool_name}>", f"</{tool_name}>"
            for start, end, inner, closed in _find_blocks(text, open_tag, close_tag, allow_unclosed):
                raw = text[start:end]
                if not closed and not allow_unclosed:
                    message = f"unclosed {open_tag}: end the call with {close_tag}"
                    found.append(
                        MalformedCall(message=message, raw=raw, span=(start, end), name=tool_name, syntax="tag")
                    )
                    continue
                arguments = {tool.tag_argument: clean_text(inner.strip("\n"))}
                found.append(ToolCall(name=tool_name, arguments=arguments, raw=raw, syntax="tag", span=(start, end)))
    result = ParsedResponse()
    covered_until = -1
    for item in sorted(found, key=lambda item: (item.span[0], -item.span[1])):
        if item.span[0] < covered_until:
            continue  # inside an earlier call
        covered_until = item.span[1]
        (result.calls if isinstance(item, ToolCall) else result.errors).append(item)  # type: ignore[arg-type]
    return result
