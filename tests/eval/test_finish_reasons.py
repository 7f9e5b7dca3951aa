"""Every finish reason a server may send maps to a turn the engine understands, or fails the episode by name."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gem_core.eval.backends import EvalBackendError, turn_finish_reason

KNOWN = {"stop": "stop", "eos": "stop", "tool_calls": "stop", "function_call": "stop", "length": "length"}
KNOWN["repetition"] = "length"


@pytest.mark.parametrize(("raw", "expected"), sorted(KNOWN.items()))
def test_finished_requests(raw: str, expected: str) -> None:
    assert turn_finish_reason(raw, "server") == expected


@given(st.one_of(st.none(), st.text(max_size=12), st.integers(), st.sampled_from(["abort", "error", "content_filter"])))
def test_anything_else_fails_with_the_reason_named(raw: object) -> None:
    """Never read as a finished reply: a partial or failed request must not be scored."""
    if raw in KNOWN:
        assert turn_finish_reason(raw, "server") == KNOWN[raw]  # type: ignore[index]
        return
    with pytest.raises(EvalBackendError, match="server") as caught:
        turn_finish_reason(raw, "server")
    assert repr(raw) in str(caught.value)
