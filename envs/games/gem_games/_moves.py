"""Parsing of the one-direction moves shared by the grid games (2048, Sokoban)."""

from __future__ import annotations

import re

__all__ = ["DIRECTIONS", "parse_direction"]

DIRECTIONS = ("up", "down", "left", "right")
_ALIASES = {
    "up": "up", "u": "up", "north": "up", "↑": "up",
    "down": "down", "d": "down", "south": "down", "↓": "down",
    "left": "left", "l": "left", "west": "left", "←": "left",
    "right": "right", "r": "right", "east": "right", "→": "right",
}  # fmt: skip
_WORD = re.compile(r"[a-z]+|[↑↓←→]")


def parse_direction(content: str) -> str | None:
    """The one direction named in ``content`` (``up``, ``U``, ``north``, ``↑``...), or ``None`` if none or several."""
    named = {_ALIASES[w] for w in _WORD.findall(content.lower()) if w in _ALIASES}
    return named.pop() if len(named) == 1 else None
