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

__all__ = ["PARSERS", "ParsedReply", "ToolCall", "family_of", "get_parser", "parse_hermes", "parse_llama3_json"]


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


_JSON = json.JSONDecoder()


def parse_llama3_json(text: str) -> ParsedReply:
    """Parse Llama 3.1/3.2/3.3's JSON tool calls: the whole reply is ``{"name": ..., "parameters": {...}}``.

    Llama 3's templates ask for one JSON object per call as the entire message (after the
    ``<|python_tag|>`` token when the decode keeps special tokens); several calls are
    separated by ``;``. ``arguments`` is read as ``parameters``. A reply that is not wholly
    such objects is content, as written (a model answering in prose, or a malformed call).
    """
    body = text.strip()
    if body.startswith("<|python_tag|>"):
        body = body[len("<|python_tag|>") :].lstrip()
    if not body.startswith("{"):
        return ParsedReply(text, ())
    calls: list[ToolCall] = []
    position = 0
    while position < len(body):
        try:
            data, end = _JSON.raw_decode(body, position)
        except json.JSONDecodeError:
            return ParsedReply(text, ())
        call = _llama3_call(data)
        if call is None:
            return ParsedReply(text, ())
        calls.append(call)
        position = end
        rest = body[position:].lstrip()
        if rest.startswith(";"):
            rest = rest[1:].lstrip()
        position = len(body) - len(rest)
    return ParsedReply("", tuple(calls))


def _llama3_call(data: Any) -> ToolCall | None:
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        return None
    if set(data) - {"name", "parameters", "arguments", "type"}:
        return None  # a JSON answer that merely has a "name" is not a call
    arguments = data.get("parameters", data.get("arguments", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    return ToolCall(data["name"], arguments) if isinstance(arguments, dict) else None


def parse_none(text: str) -> ParsedReply:
    """No tool calls: the whole reply is content (models without a tool format)."""
    return ParsedReply(text, ())


#: Parsers by name (``--tool-parser``; ``auto`` picks one by the chat template, :func:`family_of`).
PARSERS: dict[str, Callable[[str], ParsedReply]] = {
    "hermes": parse_hermes,
    "qwen": parse_hermes,
    "llama3_json": parse_llama3_json,
    "llama3": parse_llama3_json,
    "none": parse_none,
}


def family_of(tokenizer: Any) -> str:
    """The tool-call family a tokenizer's chat template was written for: ``"hermes"`` or ``"llama3_json"``.

    Read off the template, the one place that tells how the model writes calls: Qwen/Hermes
    templates render past calls in ``<tool_call>`` tags, Llama 3's mention ``<|python_tag|>``
    and ask for ``{"name": ..., "parameters": ...}``. A template naming neither (no tool
    support) gets ``"hermes"``, the most common format, which leaves plain text untouched.

    Raises:
        ConfigError: a Mistral template (``[TOOL_CALLS]``: its marker is a special token the
            decoded text drops, so its calls cannot be read from text); name a parser instead.
    """
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # several named templates: the default one
        template = template.get("default") or next(iter(template.values()), "")
    template = template if isinstance(template, str) else ""
    if "<tool_call>" in template:
        return "hermes"
    if "<|python_tag|>" in template or '"parameters": ' in template:
        return "llama3_json"
    if "[TOOL_CALLS]" in template:
        raise ConfigError(
            "the chat template is Mistral's ([TOOL_CALLS]); the gateway has no Mistral tool parser yet: pass "
            "tool_parser='none' (no tool calls) or a model of a supported family (hermes/qwen, llama3_json)"
        )
    return "hermes"


def get_parser(name: str, tokenizer: Any = None) -> Callable[[str], ParsedReply]:
    """The parser called ``name`` (``"auto"``: the one of ``tokenizer``'s family, :func:`family_of`).

    Raises:
        ConfigError: an unknown name (the message lists the known ones), or ``auto`` without a
            tokenizer or with a template of an unsupported family.
    """
    if name == "auto":
        if tokenizer is None:
            raise ConfigError("tool_parser='auto' reads the tokenizer's chat template; give the tokenizer")
        return PARSERS[family_of(tokenizer)]
    try:
        return PARSERS[name]
    except KeyError:
        raise ConfigError(f"unknown tool parser {name!r}; choose one of {sorted([*PARSERS, 'auto'])}") from None
