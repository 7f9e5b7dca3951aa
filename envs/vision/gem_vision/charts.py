"""Chart questions: bar, line and pie charts drawn from data whose answers are known exactly.

Values are drawn as integers and written on the chart (above each bar or point, on each
slice), so every question has one exact answer that the picture shows and the question
text does not: the value of a category, the category with the largest value, or the
difference between the largest and smallest values (percentages for pie charts). The
largest value is unique, so "which is largest" has one answer.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from gem_core.errors import ConfigError

from gem_vision._base import Problem, SingleTurnVisionEnv, canvas, font, to_image

__all__ = ["CATEGORIES", "ChartEnv"]

#: Category names the charts draw from.
CATEGORIES = ("Apples", "Pears", "Plums", "Grapes", "Lemons", "Kiwis", "Mangos", "Figs")
_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")
_W, _H = 420, 300


def _draw_bars(names: list[str], values: list[int], line: bool) -> Any:
    picture, draw = canvas(_W, _H)
    left, bottom, top = 40, _H - 40, 40
    top_value = max(values)
    step = (_W - left - 20) / len(names)
    draw.line([(left, top - 10), (left, bottom), (_W - 10, bottom)], fill="black", width=1)
    points = []
    for i, (name, value) in enumerate(zip(names, values, strict=True)):
        cx = left + step * (i + 0.5)
        y = bottom - (bottom - top) * value / top_value
        if line:
            points.append((cx, y))
            draw.ellipse([cx - 4, y - 4, cx + 4, y + 4], fill=_COLOURS[0])
        else:
            draw.rectangle([cx - step * 0.3, y, cx + step * 0.3, bottom], fill=_COLOURS[i % len(_COLOURS)])
        draw.text((cx, y - 12), str(value), fill="black", font=font(13), anchor="mm")
        draw.text((cx, bottom + 14), name, fill="black", font=font(12), anchor="mm")
    if line:
        draw.line(points, fill=_COLOURS[0], width=2)
    return picture


def _draw_pie(names: list[str], shares: list[int]) -> Any:
    picture, draw = canvas(_W, _H)
    box = [30, 30, 270, 270]
    start = -90.0
    for i, (name, share) in enumerate(zip(names, shares, strict=True)):
        end = start + 360 * share / 100
        draw.pieslice(box, start, end, fill=_COLOURS[i % len(_COLOURS)], outline="white")
        middle = math.radians((start + end) / 2)
        draw.text(
            (150 + 80 * math.cos(middle), 150 + 80 * math.sin(middle)),
            f"{share}%",
            fill="black",
            font=font(13),
            anchor="mm",
        )
        start = end
        # the legend names each colour
        draw.rectangle([290, 40 + 24 * i, 304, 54 + 24 * i], fill=_COLOURS[i % len(_COLOURS)])
        draw.text((312, 47 + 24 * i), name, fill="black", font=font(13), anchor="lm")
    return picture


def _shares(rng: Any, n: int) -> list[int]:
    """``n`` distinct-maximum integer percentages, each at least 5, summing to 100."""
    while True:
        cuts = sorted(rng.sample(range(1, 20), n - 1))
        parts = [b - a for a, b in zip([0, *cuts], [*cuts, 20], strict=True)]
        shares = [5 * p for p in parts]
        if shares.count(max(shares)) == 1:
            return shares


class ChartEnv(SingleTurnVisionEnv):
    """A chart and one question about it (``vision:BarChart-v0``, ``LineChart``, ``PieChart``).

    Args:
        kind: ``"bar"``, ``"line"`` or ``"pie"``.
        min_categories: Fewest categories drawn (at least 3).
        max_categories: Most categories drawn (at most 8).
    """

    def __init__(self, kind: str = "bar", min_categories: int = 3, max_categories: int = 6) -> None:
        super().__init__()
        if kind not in ("bar", "line", "pie"):
            raise ConfigError(f"chart kind must be 'bar', 'line' or 'pie', got {kind!r}")
        if not 3 <= min_categories <= max_categories <= len(CATEGORIES):
            raise ConfigError(
                f"need 3 <= min_categories <= max_categories <= {len(CATEGORIES)}, "
                f"got {min_categories}, {max_categories}"
            )
        self.kind = kind
        self.min_categories = min_categories
        self.max_categories = max_categories

    def _draw_problem(self) -> Problem:
        rng = self.py_random
        n = rng.randint(self.min_categories, self.max_categories)
        names = rng.sample(CATEGORIES, n)
        if self.kind == "pie":
            values = _shares(rng, n)
            picture = _draw_pie(names, values)
            unit = "percentage"
        else:
            while True:
                values = [rng.randint(1, 60) for _ in range(n)]
                if values.count(max(values)) == 1:
                    break
            picture = _draw_bars(names, values, line=self.kind == "line")
            unit = "value"
        question = rng.choice(("value", "largest", "range"))
        facts = {"names": names, "values": values, "question": question}
        if question == "value":
            i = rng.randrange(n)
            text = f"What is the {unit} of {names[i]} in this {self.kind} chart?"
            answer: Fraction | str = Fraction(values[i])
        elif question == "largest":
            text = f"Which category has the largest {unit} in this {self.kind} chart? Answer with its name."
            answer = names[values.index(max(values))]
        else:
            text = f"What is the difference between the largest and the smallest {unit} in this {self.kind} chart?"
            answer = Fraction(max(values) - min(values))
        return Problem(text, to_image(picture), answer, f"{self.kind}_{question}", facts)
