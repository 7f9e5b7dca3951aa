"""Hypothesis strategies for hostile model text, shared by the tool plugins' property tests.

Needs ``hypothesis`` (a test dependency of gem-core). :func:`model_text` draws responses
that mix prose with tool calls in every syntax, whose contents are arbitrary unicode (lone
surrogates included), JSON nested past the recursion limit, integer literals past ``int()``'s
digit limit, non-finite numbers and unclosed tags.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["HOSTILE_JSON", "any_text", "model_text"]

#: JSON texts (or near-JSON) that broke parsers and transports before.
HOSTILE_JSON: tuple[str, ...] = (
    "[" * 100_000 + "]" * 100_000,
    "[" * 100_000,
    '{"a":' * 5_000 + "1" + "}" * 5_000,
    "9" * 5_000,
    "-" + "9" * 4_301,
    "1e999",
    "NaN",
    "-Infinity",
    '"\\ud800"',
    '"\\udfff\\ud800x"',
    '"\ud800"',
    '{"\\ud800": 1}',
    "\x00",
    '"' + "x" * 200_000 + '"',
    "",
    "{",
    "null",
)


def any_text(max_size: int = 80) -> Any:
    """Any string over every code point, surrogates included."""
    from hypothesis import strategies as st

    return st.text(st.characters(exclude_categories=()), max_size=max_size)


def _json_values() -> Any:
    from hypothesis import strategies as st

    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        any_text(),
    )
    nested = st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(any_text(8), inner, max_size=3)),
        max_leaves=8,
    )
    # json.dumps writes floats as NaN/Infinity and surrogates as \ud800 escapes: exactly the hostile forms.
    return st.one_of(nested.map(json.dumps), st.sampled_from(HOSTILE_JSON))


def model_text(tool_names: Sequence[str], arguments: Sequence[str] = ("code", "query")) -> Any:
    """Responses holding calls to ``tool_names`` in every syntax, with hostile contents.

    Args:
        tool_names: Names to call (include an unknown one to cover that path too).
        arguments: Argument names to put hostile values under in JSON calls.
    """
    from hypothesis import strategies as st

    names = st.sampled_from([*tool_names, "no_such_tool"])
    payload = st.one_of(any_text(), st.sampled_from(HOSTILE_JSON))
    value = _json_values()

    def json_call(name: str, argument: str, raw_value: str, as_string: bool) -> str:
        args = f'{{"{argument}": {raw_value}}}'
        body = json.dumps(args) if as_string else args
        return f'<tool_call>{{"name": "{name}", "arguments": {body}}}</tool_call>'

    piece = st.one_of(
        any_text(),
        st.builds(lambda n, p: f"<{n}>{p}</{n}>", names, payload),
        st.builds(lambda n, p: f"<{n}>{p}", names, payload),
        st.builds(json_call, names, st.sampled_from(list(arguments)), value, st.booleans()),
        st.builds(lambda p: f"<tool_call>{p}</tool_call>", payload),
        st.builds(lambda p: f"<tool_call>{p}", payload),
    )
    return st.lists(piece, min_size=1, max_size=4).map("".join)
