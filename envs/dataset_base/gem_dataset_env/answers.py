"""Answer extraction shared by the dataset envs (math, QA, reasoning-gym): no grading dependencies."""

from __future__ import annotations

import re

__all__ = ["extract_boxed"]

_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE_RE = re.compile(r"\\[{}]|[{}]")


def extract_boxed(text: str) -> list[str]:
    r"""Contents of every outermost balanced ``\boxed{...}`` (or ``\fbox{...}``) in ``text``, in order.

    One linear pass with a brace stack, so malformed or huge text is cheap and never raises;
    unbalanced boxes are ignored and escaped braces (``\{``) do not count.
    """
    box_opens = {m.end() - 1 for m in _BOXED_RE.finditer(text)}
    if not box_opens:
        return []
    stack: list[int] = []
    closed: list[tuple[int, int]] = []
    for token in _BRACE_RE.finditer(text):
        if token.group() == "{":
            stack.append(token.start())
        elif token.group() == "}" and stack:
            start = stack.pop()
            if start in box_opens:
                closed.append((start + 1, token.start()))
    found: list[tuple[int, int]] = []
    for start, end in sorted(closed):  # keep outermost boxes: drop those inside a kept one
        if not found or start > found[-1][1]:
            found.append((start, end))
    return [text[a:b].strip() for a, b in found]
