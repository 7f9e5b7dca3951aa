r"""Forging the vision rewards: only the exact answer in the last \boxed{} scores."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_vision._base import REWARD_CORRECT, REWARD_FORMAT_ERROR, grade, parse_number


@pytest.mark.parametrize(
    "reply",
    [r"\boxed{40}", r"so \boxed{x = 40}", r"\boxed{40^\circ}", r"\boxed{40°}", r"\boxed{40.0}", r"\boxed{ 40 }"],
    ids=["plain", "x-equals", "latex-degrees", "degree-sign", "decimal", "spaces"],
)
def test_the_right_number_scores(reply: str) -> None:
    assert grade(reply, Fraction(40))[0] == REWARD_CORRECT


@pytest.mark.parametrize(
    "reply",
    [
        r"\boxed{30 or 40}",
        r"\boxed{30, 40}",
        r"\boxed{40, 40}",
        r"\boxed{90-50}",
        r"\boxed{40}\boxed{41}",
        r"\boxed{}",
        r"\boxed{inf}",
        r"\boxed{nan}",
        r"\boxed{4e1}",
        r"\boxed{40 and also anything}",
        "40",
        r"\boxed{" + " ".join(str(i) for i in range(200)) + "}",
        r"\boxed{x}",
    ],
    ids=[
        "hedge-or",
        "hedge-list",
        "repeated",
        "expression",
        "last-box-wrong",
        "empty",
        "inf",
        "nan",
        "exponent",
        "trailing-text",
        "no-box",
        "every-number",
        "variable",
    ],
)
def test_forged_numbers_score_nothing(reply: str) -> None:
    reward, info = grade(reply, Fraction(40))
    assert reward < REWARD_CORRECT and not info["correct"]


@pytest.mark.parametrize(
    ("reply", "correct"),
    [
        (r"\boxed{Apples}", True),
        (r"\boxed{\text{apples}}", True),
        (r"\boxed{Apples or Pears}", False),
        (r"\boxed{Apples, Pears, Plums}", False),
        (r"\boxed{Apple}", False),
        (r"\boxed{Pears} \boxed{Apples}", True),
        (r"\boxed{Apples} \boxed{Pears}", False),
    ],
    ids=["name", "text-lowercase", "hedge", "every-name", "prefix", "last-box-right", "last-box-wrong"],
)
def test_labels_need_exactly_the_one_name(reply: str, correct: bool) -> None:
    assert grade(reply, "Apples")[1]["correct"] is correct


def test_no_box_is_a_format_error() -> None:
    reward, info = grade("The answer is 40.", Fraction(40))
    assert reward == REWARD_FORMAT_ERROR and info["format_error"]


@settings(max_examples=80, deadline=None)
@given(
    st.integers(-1000, 1000),
    st.integers(-1000, 1000),
    st.sampled_from([", ", " or ", " ", "/", ";", " \\text{or} "]),
)
def test_a_box_with_two_numbers_never_scores(answer: int, other: int, separator: str) -> None:
    for reply in (f"\\boxed{{{answer}{separator}{other}}}", f"\\boxed{{{other}{separator}{answer}}}"):
        assert grade(reply, Fraction(answer))[0] < REWARD_CORRECT


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=30))
def test_parse_number_takes_one_plain_number_or_nothing(text: str) -> None:
    value = parse_number(text)
    if value is not None:
        assert str(value.numerator) in text.replace("-", "") or "." in text
