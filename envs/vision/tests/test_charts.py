"""Chart questions: the answer is the data's, unique, and only in the picture."""

from __future__ import annotations

from fractions import Fraction

import pytest
from gem_core.errors import ConfigError

from gem_vision._base import answer_text
from gem_vision.charts import ChartEnv


@pytest.mark.parametrize("kind", ["bar", "line", "pie"])
def test_answers_follow_from_the_data(kind: str) -> None:
    env = ChartEnv(kind)
    seen = set()
    for seed in range(40):
        env.reset(seed=seed)
        p = env.problem
        assert p is not None
        names, values, question = p.facts["names"], p.facts["values"], p.facts["question"]
        seen.add(question)
        assert values.count(max(values)) == 1
        if kind == "pie":
            assert sum(values) == 100 and min(values) >= 5
        if question == "largest":
            assert p.answer == names[values.index(max(values))]
        elif question == "range":
            assert p.answer == Fraction(max(values) - min(values))
        else:
            assert p.answer in [Fraction(v) for v in values]
            assert not any(str(v) in p.text for v in values)  # the numbers are only drawn
        assert env.step(f"\\boxed{{{answer_text(p.answer)}}}")[1] == 1.0
    assert seen == {"value", "largest", "range"}


def test_naming_every_category_scores_nothing() -> None:
    env = ChartEnv("bar")
    for seed in range(30):
        env.reset(seed=seed)
        assert env.problem is not None
        if env.problem.facts["question"] == "largest":
            names = ", ".join(env.problem.facts["names"])
            assert env.step(f"\\boxed{{{names}}}")[1] == 0.0
            return
    raise AssertionError("no 'largest' question in 30 seeds")


@pytest.mark.parametrize(("kwargs", "match"), [({"kind": "radar"}, "radar"), ({"max_categories": 9}, "max")])
def test_bad_settings_are_config_errors(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ChartEnv(**kwargs)  # type: ignore[arg-type]
