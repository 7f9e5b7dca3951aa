"""gem_core.cli_values.parse_seeds: every list of seeds and ranges round-trips; every bad part is named."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gem_core.cli_values import parse_seeds
from gem_core.errors import ConfigError

part = st.one_of(
    st.integers(0, 10_000).map(lambda n: (str(n), [n])),
    st.tuples(st.integers(0, 500), st.integers(0, 50)).map(
        lambda t: (f"{t[0]}-{t[0] + t[1]}", list(range(t[0], t[0] + t[1] + 1)))
    ),
)


@given(st.lists(part, min_size=1, max_size=6))
def test_any_mix_of_seeds_and_ranges_parses(parts: list[tuple[str, list[int]]]) -> None:
    text = ",".join(p for p, _ in parts)
    assert parse_seeds(text) == [seed for _, seeds in parts for seed in seeds]


@given(st.integers(1, 500), st.integers(1, 50))
def test_every_backwards_range_says_so(high: int, gap: int) -> None:
    with pytest.raises(ConfigError, match=rf"runs backwards; write it as {high}-{high + gap}"):
        parse_seeds(f"0,{high + gap}-{high}")


@pytest.mark.parametrize("text", ["", " , ", "a", "1-b", "1.5", "3-"], ids=repr)
def test_bad_text_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_seeds(text)
