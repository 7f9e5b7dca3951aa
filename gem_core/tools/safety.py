r"""Making model-written values safe to hand to tools.

A model's text can hold anything: JSON nested far beyond Python's recursion limit, integer
literals longer than ``int()`` accepts, ``NaN``, lone UTF-16 surrogates (``"\ud800"``) that no
UTF-8 encoder takes. Every path from a response to a tool goes through these helpers, which
either return a value every tool and transport can encode, or raise :class:`UnsafeValue` with
a message for the model. They never raise anything else.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MAX_NESTING", "UnsafeValue", "clean_arguments", "clean_text", "loads_model_json"]

#: Deepest nesting of arrays and objects accepted in a call's arguments. Real tool
#: arguments are a few levels deep; the bound keeps every consumer (pydantic, json, repr,
#: the MCP SDK) far from the interpreter's recursion limit.
MAX_NESTING = 64

#: About 4,000 decimal digits: well inside ``int``/``str`` conversion's default limit of 4,300.
_MAX_INT_BITS = 13_000
_SURROGATE = re.compile("[\ud800-\udfff]")
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


class UnsafeValue(ValueError):
    """A model-written value that no tool could take; ``str(exc)`` is a message for the model."""


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, so it encodes as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def _nesting(text: str) -> int:
    """Deepest bracket nesting of a JSON text, not counting brackets inside strings (linear, no recursion)."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _reject_constant(name: str) -> Any:
    raise UnsafeValue(f"{name} is not valid JSON; write numbers as finite decimals")


def loads_model_json(text: str, *, what: str = "the tool call") -> Any:
    """Decode JSON a model wrote.

    Args:
        text: The JSON text.
        what: How to name the text in error messages.

    Returns:
        The decoded value (strings cleaned of lone surrogates, at most :data:`MAX_NESTING` deep).

    Raises:
        UnsafeValue: not JSON, nested too deeply, an integer too long, ``NaN`` or ``Infinity``.
    """
    if _nesting(text) > MAX_NESTING:
        raise UnsafeValue(f"{what} nests arrays/objects more than {MAX_NESTING} levels deep")
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise UnsafeValue(f"{what} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except UnsafeValue as exc:
        raise UnsafeValue(f"{what}: {exc}") from None
    except (ValueError, RecursionError) as exc:  # an integer literal past int()'s digit limit, say
        raise UnsafeValue(f"{what} cannot be decoded: {exc}") from None
    return clean_arguments(value, what=what)


def clean_arguments(value: Any, *, what: str = "the arguments") -> Any:
    """A copy of a JSON-like value that every tool and transport can encode.

    Strings (keys included) lose their lone surrogates; the value must be built from ``dict``
    (with string keys), ``list``/``tuple``, ``str``, ``int``, finite ``float``, ``bool`` and
    ``None``, at most :data:`MAX_NESTING` levels deep. Iterative, so any depth is safe to check.

    Raises:
        UnsafeValue: too deep, a non-finite float, or a value that is not JSON-like.
    """
    root: list[Any] = [None]
    # Each entry: (value, container to store into, key or index, depth).
    stack: list[tuple[Any, Any, Any, int]] = [(value, root, 0, 0)]
    while stack:
        item, parent, slot, depth = stack.pop()
        if isinstance(item, str):
            parent[slot] = clean_text(item)
        elif item is None or isinstance(item, bool):
            parent[slot] = item
        elif isinstance(item, int):
            if item.bit_length() > _MAX_INT_BITS:
                raise UnsafeValue(f"{what} hold an integer with more than 4000 digits")
            parent[slot] = item
        elif isinstance(item, float):
            if item != item or item in (float("inf"), float("-inf")):
                raise UnsafeValue(f"{what} hold a non-finite number ({item}); use finite numbers")
            parent[slot] = item
        elif isinstance(item, (dict, list, tuple)):
            if depth >= MAX_NESTING:
                raise UnsafeValue(f"{what} nest arrays/objects more than {MAX_NESTING} levels deep")
            if isinstance(item, dict):
                copy: Any = {}
                for key, sub in item.items():
                    if not isinstance(key, str):
                        raise UnsafeValue(f"{what} hold a key that is not a string ({type(key).__name__})")
                    clean_key = clean_text(key)
                    copy[clean_key] = None
                    stack.append((sub, copy, clean_key, depth + 1))
            else:
                copy = [None] * len(item)
                stack.extend((sub, copy, index, depth + 1) for index, sub in enumerate(item))
            parent[slot] = copy
        else:
            raise UnsafeValue(f"{what} hold a {type(item).__name__}, which is not a JSON value")
    return root[0]
