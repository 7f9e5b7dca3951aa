"""Infos cross the wire as JSON: ``json_safe`` turns any info value into JSON types."""

from __future__ import annotations

import json
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_openenv.server import json_safe

leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=10)
    | st.integers(-(2**31), 2**31 - 1).map(np.int64)
    | st.floats(width=32).map(np.float32)
    | st.builds(object)
)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=5) | st.integers(), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(values)
def test_any_value_becomes_json_and_stays_put(value: object) -> None:
    safe = json_safe(value)
    text = json.dumps(safe, allow_nan=False)  # strict JSON: no NaN/inf slip through
    assert json.loads(text) == safe
    assert json_safe(safe) == safe


def test_finite_numbers_and_text_are_kept_as_they_are() -> None:
    info = {"success": True, "n": np.int64(3), "x": np.float32(0.5), "path": ("a", 1), "bad": math.inf}
    assert json_safe(info) == {"success": True, "n": 3, "x": 0.5, "path": ["a", 1], "bad": "inf"}
