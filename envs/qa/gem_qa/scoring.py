"""SQuAD-style answer normalisation, exact match and token F1 against several reference answers."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

__all__ = ["best_exact_match", "best_f1", "exact_match", "normalize_answer", "token_f1"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and the articles a/an/the, collapse whitespace."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, reference: str) -> bool:
    """Equal after :func:`normalize_answer`."""
    return normalize_answer(prediction) == normalize_answer(reference)


def token_f1(prediction: str, reference: str) -> float:
    """Harmonic mean of token precision and recall after normalisation (0 when nothing overlaps)."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(reference).split()
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def best_exact_match(prediction: str, references: Iterable[str]) -> bool:
    """Exact match against any of the references."""
    return any(exact_match(prediction, r) for r in references)


def best_f1(prediction: str, references: Iterable[str]) -> float:
    """The best token F1 over the references (0 for no references)."""
    return max((token_f1(prediction, r) for r in references), default=0.0)
