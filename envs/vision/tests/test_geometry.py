"""Geometry problems: each answer is the geometry of the drawing, the text never gives the numbers away."""

from __future__ import annotations

import io
import random

import pytest
from gem_core.errors import ConfigError
from PIL import Image as PILImage

from gem_vision._base import answer_text
from gem_vision.geometry import KINDS, GeometryEnv


def _answer_from_facts(kind: str, facts: dict[str, object]) -> float:
    """The answer recomputed from what was drawn, independently of the generator."""
    if kind == "triangle_angle":
        return 180 - facts["a"] - facts["b"]  # type: ignore[operator]
    if kind == "isosceles_base":
        return (180 - facts["apex"]) / 2  # type: ignore[operator]
    if kind == "straight_line":
        return 180 - facts["a"]  # type: ignore[operator]
    if kind == "right_hypotenuse":
        a, b = facts["legs"]  # type: ignore[misc]
        return float((a * a + b * b) ** 0.5)
    return facts["w"] * facts["h"]  # type: ignore[operator]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_answers_are_exact_and_follow_from_the_drawing(kind: str) -> None:
    for seed in range(25):
        problem = KINDS[kind](random.Random(seed))
        assert float(problem.answer) == _answer_from_facts(kind, problem.facts)
        assert problem.answer > 0 and problem.answer.denominator == 1
        shown = [str(v) for v in problem.facts.values() if isinstance(v, int)]
        assert not any(v in problem.text for v in [*shown, answer_text(problem.answer)])  # only in the picture
        with PILImage.open(io.BytesIO(problem.image.read())) as decoded:
            assert decoded.size == problem.image.size and decoded.format == "PNG"


def test_the_env_grades_its_own_answer_and_refuses_the_rest() -> None:
    env = GeometryEnv()
    wins = 0
    for seed in range(10):
        env.reset(seed=seed)
        assert env.problem is not None
        right = answer_text(env.problem.answer)
        _, reward, terminated, _, info = env.step(f"\\boxed{{{right}}}")
        wins += reward == 1.0 and terminated and info["success"]
        env.reset(seed=seed)
        assert env.step(f"\\boxed{{{int(right) + 1}}}")[1] == 0.0
    assert wins == 10


def test_seeds_reproduce_problems_and_differ_across_seeds() -> None:
    a, b = GeometryEnv(), GeometryEnv()
    first = [a.reset(seed=s)[0] for s in range(6)]
    assert first == [b.reset(seed=s)[0] for s in range(6)]
    assert len({o.images[0].sha256 for o in first}) == 6


def test_unknown_kind_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="circle"):
        GeometryEnv(kinds=["circle"])
