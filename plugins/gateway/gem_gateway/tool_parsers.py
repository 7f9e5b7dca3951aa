"""Tool-call parsers: a model family's reply text into OpenAI ``tool_calls`` (and the text left as content).

The parser must be the one the model's chat template was trained with: the template renders
past calls that way, so the model writes new ones that way. Only the text is parsed; the
token ids the model sampled are recorded as they are, whatever the parse.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gem_core.errors import ConfigError

__all__ = ["PARSERS", "ParsedReply", "ToolCall", "get_parser", "parse_hermes"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One parsed call: the function's name and its arguments (a JSON object)."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ParsedReply:
    """A reply split into the text shown as ``content`` and the tool calls."""

    content: str
    tool_calls: tuple[ToolCall, ...]


# Qwen2.5/Qwen3 and Hermes write each call as a JSON object between these tags.
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def parse_hermes(text: str) -> ParsedReply:
    """Parse ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (Qwen, Hermes).

    A block that is not a JSON object with a string ``name`` and an object ``arguments``
    stays in the content as written (the model's malformed call is the harness's to see,
    as vLLM's hermes parser leaves it), never silently dropped.
    """
    calls: list[ToolCall] = []
    kept: list[str] = []
    position = 0
    for match in _HERMES.finditer(text):
        call = _hermes_call(match.group(1))
        if call is None:
            continue
        kept.append(text[position : match.start()])
        position = match.end()
        calls.append(call)
    if not calls:
        return ParsedReply(text, ())
    kept.append(text[position:])
    return ParsedReply("".join(kept).strip(), tuple(calls))


def _hermes_call(body: str) -> ToolCall | None:
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        return None
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(data["name"], arguments)


def parse_none(text: str) -> ParsedReply:
    """No tool calls: the whole reply is content (models without a tool format)."""
    return ParsedReply(text, ())


#: Parsers by name (``--tool-parser``).
PARSERS: dict[str, Callable[[str], ParsedReply]] = {"hermes": parse_hermes, "qwen": parse_hermes, "none": parse_none}


def get_parser(name: str) -> Callable[[str], ParsedReply]:
    """The parser called ``name``.

    Raises:
        ConfigError: an unknown name (the message lists the known ones).
    """
    try:
        return PARSERS[name]
    except KeyError:
        raise ConfigError(f"unknown tool parser {name!r}; choose one of {sorted(PARSERS)}") from None
