"""The word list shipped with gem-games for Crosswords and WordSearch (``data/words_clues.jsonl``).

Each row has ``word`` (upper case), ``clue`` and ``tier``: ``basic`` (common words) or ``hard``
(rarer words, used by the ``hardcore`` variants). Loaded once per process; no network.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

__all__ = ["WordClue", "load_words"]


@dataclass(frozen=True)
class WordClue:
    word: str
    clue: str
    tier: str


@lru_cache(maxsize=1)
def _all_words() -> tuple[WordClue, ...]:
    text = resources.files("gem_games").joinpath("data/words_clues.jsonl").read_text(encoding="utf-8")
    rows = (json.loads(line) for line in text.splitlines() if line.strip())
    return tuple(WordClue(r["word"].upper(), r["clue"], r["tier"]) for r in rows)


def load_words(tier: str | None = None) -> tuple[WordClue, ...]:
    """The shipped words in file order, optionally only one ``tier`` (``basic`` or ``hard``)."""
    words = _all_words()
    return words if tier is None else tuple(w for w in words if w.tier == tier)
