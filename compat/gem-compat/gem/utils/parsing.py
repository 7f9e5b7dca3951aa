"""GEM's ``gem.utils.parsing``: pull the answer out of a model's response."""

from __future__ import annotations

import re

__all__ = [
    "extract_code_from_model",
    "extract_last_boxed_answer",
    "extract_last_tagged_answer",
    "last_boxed_only_string",
    "remove_boxed",
]

_CODE_BLOCK = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def last_boxed_only_string(text: str) -> str | None:
    r"""The last ``\boxed{...}`` (or ``\fbox{...}``) of ``text`` with its braces balanced, or ``None``."""
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
    if start < 0:
        return None
    depth = 0
    for end in range(start, len(text)):
        if text[end] == "{":
            depth += 1
        elif text[end] == "}":
            depth -= 1
            if depth == 0:
                return text[start : end + 1]
    return None  # unbalanced: the box never closes


def remove_boxed(boxed: str | None) -> str | None:
    r"""The inside of ``\boxed{...}``; ``None`` for anything else."""
    prefix = "\\boxed{"
    if isinstance(boxed, str) and boxed.startswith(prefix) and boxed.endswith("}"):
        return boxed[len(prefix) : -1]
    return None


def extract_last_boxed_answer(solution: str) -> str | None:
    r"""The content of the last ``\boxed{}`` in ``solution``, or ``None``."""
    return remove_boxed(last_boxed_only_string(solution))


def extract_code_from_model(model_response: str) -> str | None:
    """The last fenced code block of a response, stripped; ``None`` when there is none."""
    blocks = _CODE_BLOCK.findall(model_response)
    return blocks[-1].strip() if blocks else None


def extract_last_tagged_answer(model_response: str) -> str | None:
    """The last ``<answer>...</answer>`` of a response, stripped; ``None`` when there is none."""
    answers = _ANSWER_TAG.findall(model_response)
    return answers[-1].strip() if answers else None
