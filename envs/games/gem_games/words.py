"""The word list shipped with the package (``data/words.txt``): read once, no download."""

from __future__ import annotations

import functools
from importlib import resources

__all__ = ["all_words", "words_of_length"]


@functools.cache
def all_words() -> tuple[str, ...]:
    """Every word of the list: lower-case ASCII letters, 3 to 7 long, sorted."""
    text = resources.files("gem_games").joinpath("data/words.txt").read_text(encoding="utf-8")
    return tuple(line for line in (raw.strip() for raw in text.splitlines()) if line and not line.startswith("#"))


@functools.cache
def words_of_length(length: int) -> tuple[str, ...]:
    """The words with exactly ``length`` letters (empty when the list has none)."""
    return tuple(word for word in all_words() if len(word) == length)
