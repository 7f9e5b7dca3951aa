"""Command-line values the CLIs and the adapters' dataset builders share: seeds, JSON objects, ``--kw`` pairs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gem_core.errors import ConfigError

__all__ = ["parse_json_object", "parse_kwargs", "parse_seeds"]


def parse_seeds(text: str) -> list[int]:
    """Parse ``"0-99"``, ``"1,5,9"`` or a mix like ``"0-9,100"`` into a list of seeds.

    Raises:
        ConfigError: Not integers or ranges, or an empty/backwards range.
    """
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        low, sep, high = part.partition("-") if not part.startswith("-") else (part, "", "")
        try:
            first, last = (int(low), int(high)) if sep else (int(part), int(part))
        except ValueError:
            raise ConfigError(f"bad seed {part!r} in {text!r}; use integers and ranges like 0-99,200") from None
        if last < first:
            raise ConfigError(f"seed range {part!r} runs backwards; write it as {last}-{first}")
        seeds.extend(range(first, last + 1))
    if not seeds:
        raise ConfigError(f"no seeds in {text!r}")
    return seeds


def parse_json_object(text: str | None, flag: str) -> dict[str, Any] | None:
    """Parse an option given as a JSON object (``--env-kwargs '{"high": 50}'``); ``None`` stays ``None``.

    Raises:
        ConfigError: Not JSON, or not an object; the message names ``flag``.
    """
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag} must be a JSON object, got {type(value).__name__}")
    return value


def parse_kwargs(pairs: Sequence[str]) -> dict[str, Any]:
    """``--kw key=value`` pairs; values are JSON when they parse as JSON, else strings.

    Raises:
        ConfigError: a pair without ``=`` or without a key.
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--kw expects key=value, got {pair!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out
