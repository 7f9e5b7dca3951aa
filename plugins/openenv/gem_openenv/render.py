"""What the model reads of an OpenEnv observation: every field it carries, rendered as text.

OpenEnv observations are pydantic models with fields of any type (chess: ``fen``, ``legal_moves``,
``is_check``, ``result``; textarena: ``prompt`` and ``messages``). Showing one of them (say, the only
string field) hides the rest from the model, so :func:`render_observation` writes each field that has a
value, in the schema's order, as ``name: value`` (lists of plain values comma-separated, nested values as
compact JSON, multi-line text on lines of its own). An observation with a single text field and nothing
else is that text. OpenEnv's MCP observations (``CallToolObservation``, ``ListToolsObservation``) read as
OpenEnv's ``MCPToolClient`` returns them: the tool's result (FastMCP's ``data``), or the tool list.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["render_observation", "render_tools", "tool_result"]

#: Fields of every OpenEnv observation that are the protocol's, not the env's to show.
PROTOCOL_FIELDS = frozenset({"metadata", "done", "reward"})


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _scalar(value: Any) -> str:
    """A plain value as the model reads it: text as is, other values as JSON (``true``, ``null``, ``3``)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)


def _field(name: str, value: Any) -> str:
    if isinstance(value, str) and "\n" in value:
        return f"{name}:\n{value}"
    if _plain(value):
        return f"{name}: {_scalar(value)}"
    if isinstance(value, list) and all(_plain(item) for item in value):
        return f"{name}: " + (", ".join(_scalar(item) for item in value) if value else "(none)")
    return f"{name}: {json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)}"


def tool_result(result: Any) -> Any:
    """A tool's result as OpenEnv's ``MCPToolClient.call_tool`` returns it (FastMCP's ``data`` when present)."""
    if isinstance(result, Mapping) and "data" in result:
        return result["data"]
    return result


def render_tools(tools: Iterable[Any]) -> str:
    """One line per tool, ``- name(arg: type, ...): description`` (from ``inputSchema`` or ``input_schema``)."""
    lines = []
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        schema = tool.get("input_schema", tool.get("inputSchema")) or {}
        properties = schema.get("properties", {}) if isinstance(schema, Mapping) else {}
        required = set(schema.get("required", ())) if isinstance(schema, Mapping) else set()
        arguments = []
        for name, spec in properties.items() if isinstance(properties, Mapping) else ():
            kind = spec.get("type", "any") if isinstance(spec, Mapping) else "any"
            arguments.append(f"{name}: {kind if isinstance(kind, str) else '|'.join(map(str, kind))}")
            if name not in required:
                arguments[-1] += " (optional)"
        description = " ".join(str(tool.get("description") or "").split())
        lines.append(f"- {tool.get('name')}({', '.join(arguments)})" + (f": {description}" if description else ""))
    return "\n".join(lines) if lines else "(no tools)"


def render_observation(
    observation: Mapping[str, Any],
    order: Sequence[str] = (),
    metadata: Mapping[str, Any] | None = None,
) -> str:
    """The observation as the model reads it: every field with a value, nothing picked by type.

    Args:
        observation: The observation frame's ``observation`` object.
        order: The schema's field order (fields not in it follow, sorted).
        metadata: The frame's ``metadata``: shown when the observation has nothing else (OpenEnv's MCP envs say
            "ready" there at reset); its ``error`` (a refused action, where OpenEnv's envs put it) always.

    Returns:
        The text: the lone text field as is, else one ``name: value`` entry per field.
    """
    shown = {k: v for k, v in observation.items() if k not in PROTOCOL_FIELDS and v is not None}
    if "tool_name" in shown and ("result" in shown or "error" in shown):  # OpenEnv's CallToolObservation
        return _render_call(shown)
    if set(shown) == {"tools"} and isinstance(shown["tools"], list):  # OpenEnv's ListToolsObservation
        return "Tools:\n" + render_tools(shown["tools"])
    names = [k for k in order if k in shown] + sorted(k for k in shown if k not in order)
    if not names:
        if metadata:
            return "\n".join(_field(k, v) for k, v in metadata.items() if v is not None)
        return ""
    text = str(shown[names[0]]) if len(names) == 1 and isinstance(shown[names[0]], str) else None
    text = text if text is not None else "\n".join(_field(name, shown[name]) for name in names)
    error = (metadata or {}).get("error")
    return text + f"\nerror: {_scalar(error)}" if error not in (None, "") and "error" not in shown else text


def _render_call(shown: Mapping[str, Any]) -> str:
    error = shown.get("error")
    if isinstance(error, Mapping):
        kind = error.get("error_type", "error")
        return f"Tool {shown['tool_name']!s} failed ({kind}): {error.get('message', '')}"
    result = tool_result(shown.get("result"))
    if isinstance(result, Mapping) and result.get("is_error") and isinstance(result.get("content"), list):
        texts = [c.get("text", "") for c in result["content"] if isinstance(c, Mapping)]
        return f"Tool {shown['tool_name']!s} failed: " + "\n".join(map(str, texts))
    return _scalar(result) if _plain(result) else json.dumps(result, ensure_ascii=False, sort_keys=True, default=repr)
