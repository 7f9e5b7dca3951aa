"""Visual geometry in Geometry3K's shape: a drawn diagram, a short question, an exact answer.

Each problem is drawn to scale from integers, so its answer is exact: the missing angle of
a triangle, the third angle on a straight line, an isosceles triangle's base angle, the
hypotenuse of a right triangle (Pythagorean triples) and a rectangle's area. The given
values are written only on the diagram: the question text never holds them, so the
picture must be read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

from gem_vision._base import Problem, SingleTurnVisionEnv, canvas, font, to_image

__all__ = ["KINDS", "GeometryEnv"]

_SIZE = 320
_TRIPLES = ((3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25), (20, 21, 29))


def _triangle_points(a_deg: float, b_deg: float) -> list[tuple[float, float]]:
    """Vertices A, B, C of a triangle with angles ``a_deg`` at A and ``b_deg`` at B, fitted to the canvas."""
    a, b = math.radians(a_deg), math.radians(b_deg)
    # A at the origin, B at (1, 0); C where the two sides from A and B meet
    t = math.sin(b) / math.sin(a + b)
    points = [(0.0, 0.0), (1.0, 0.0), (t * math.cos(a), t * math.sin(a))]
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    scale = (_SIZE - 100) / max(max(xs) - min(xs), max(ys) - min(ys))
    return [(50 + (x - min(xs)) * scale, _SIZE - 50 - (y - min(ys)) * scale) for x, y in points]


def _label_inside(points: list[tuple[float, float]], corner: int, text: str, draw: object) -> None:
    """Write ``text`` just inside the triangle at vertex ``corner``."""
    cx = sum(p[0] for p in points) / 3
    cy = sum(p[1] for p in points) / 3
    x, y = points[corner]
    at = (x + (cx - x) * 0.28, y + (cy - y) * 0.28)
    draw.text(at, text, fill="black", font=font(15), anchor="mm")  # type: ignore[attr-defined]


def triangle_angle(rng: object) -> Problem:
    """Two angles of a triangle are drawn and labelled; the third is x."""
    r = rng  # random.Random
    a = r.randint(30, 100)  # type: ignore[attr-defined]
    b = r.randint(25, 150 - a)  # type: ignore[attr-defined]
    points = _triangle_points(a, b)
    picture, draw = canvas(_SIZE, _SIZE)
    draw.polygon(points, outline="black", width=2)
    _label_inside(points, 0, f"{a}°", draw)
    _label_inside(points, 1, f"{b}°", draw)
    _label_inside(points, 2, "x°", draw)
    return Problem("Find x.", to_image(picture), Fraction(180 - a - b), "triangle_angle", {"a": a, "b": b})


def isosceles_base(rng: object) -> Problem:
    """An isosceles triangle (tick marks on the equal sides) with its apex angle labelled; a base angle is x."""
    apex = 2 * rng.randint(10, 60)  # type: ignore[attr-defined]
    base = (180 - apex) // 2
    points = _triangle_points(base, base)
    picture, draw = canvas(_SIZE, _SIZE)
    draw.polygon(points, outline="black", width=2)
    for end in (0, 1):  # one tick across the middle of each equal side
        (x1, y1), (x2, y2) = points[end], points[2]
        mx, my = (x1 + x2) / 2, (y1 + y2) / 2
        dx, dy = x2 - x1, y2 - y1
        n = math.hypot(dx, dy)
        px, py = -dy / n * 8, dx / n * 8
        draw.line([(mx - px, my - py), (mx + px, my + py)], fill="black", width=2)
    _label_inside(points, 2, f"{apex}°", draw)
    _label_inside(points, 0, "x°", draw)
    return Problem("Find x.", to_image(picture), Fraction(base), "isosceles_base", {"apex": apex})


def straight_line(rng: object) -> Problem:
    """A ray splits a straight angle; one part is labelled, the other is x."""
    a = rng.randint(20, 160)  # type: ignore[attr-defined]
    picture, draw = canvas(_SIZE, _SIZE // 2 + 60)
    cx, cy = _SIZE / 2, _SIZE / 2
    draw.line([(30, cy), (_SIZE - 30, cy)], fill="black", width=2)
    angle = math.radians(180 - a)  # the labelled angle a lies on the right, between the ray and the line
    end = (cx + 130 * math.cos(angle), cy - 130 * math.sin(angle))
    draw.line([(cx, cy), end], fill="black", width=2)
    right = math.radians((180 - a) / 2)
    left = math.radians(180 - a + a / 2)
    draw.text((cx + 55 * math.cos(right), cy - 55 * math.sin(right)), "x°", fill="black", font=font(15), anchor="mm")
    draw.text((cx + 55 * math.cos(left), cy - 55 * math.sin(left)), f"{a}°", fill="black", font=font(15), anchor="mm")
    return Problem("Find x.", to_image(picture), Fraction(180 - a), "straight_line", {"a": a})


def right_hypotenuse(rng: object) -> Problem:
    """A right triangle (square mark) with both legs labelled; the hypotenuse is x."""
    leg1, leg2, hyp = rng.choice(_TRIPLES)  # type: ignore[attr-defined]
    k = rng.randint(1, 3)  # type: ignore[attr-defined]
    leg1, leg2, hyp = leg1 * k, leg2 * k, hyp * k
    scale = (_SIZE - 110) / max(leg1, leg2)
    ax, ay = 60.0, _SIZE - 55.0
    bx, cy = ax + leg1 * scale, ay - leg2 * scale
    picture, draw = canvas(_SIZE, _SIZE)
    draw.polygon([(ax, ay), (bx, ay), (ax, cy)], outline="black", width=2)
    draw.rectangle([ax, ay - 14, ax + 14, ay], outline="black", width=1)
    draw.text(((ax + bx) / 2, ay + 16), str(leg1), fill="black", font=font(15), anchor="mm")
    draw.text((ax - 22, (ay + cy) / 2), str(leg2), fill="black", font=font(15), anchor="mm")
    draw.text(((ax + bx) / 2 + 16, (ay + cy) / 2 - 12), "x", fill="black", font=font(15), anchor="mm")
    facts = {"legs": (leg1, leg2)}
    return Problem("Find x.", to_image(picture), Fraction(hyp), "right_hypotenuse", facts)


def rectangle_area(rng: object) -> Problem:
    """A rectangle with its sides labelled; the question asks for its area."""
    w = rng.randint(2, 30)  # type: ignore[attr-defined]
    h = rng.randint(2, 30)  # type: ignore[attr-defined]
    scale = (_SIZE - 110) / max(w, h)
    x0, y0 = 60.0, 50.0
    picture, draw = canvas(_SIZE, _SIZE)
    draw.rectangle([x0, y0, x0 + w * scale, y0 + h * scale], outline="black", width=2)
    draw.text((x0 + w * scale / 2, y0 + h * scale + 16), f"{w} cm", fill="black", font=font(15), anchor="mm")
    draw.text((x0 + w * scale + 30, y0 + h * scale / 2), f"{h} cm", fill="black", font=font(15), anchor="mm")
    problem = "Find the area of the rectangle in square centimetres."
    return Problem(problem, to_image(picture), Fraction(w * h), "rectangle_area", {"w": w, "h": h})


#: The problem generators by name.
KINDS: dict[str, Callable[[object], Problem]] = {
    "triangle_angle": triangle_angle,
    "isosceles_base": isosceles_base,
    "straight_line": straight_line,
    "right_hypotenuse": right_hypotenuse,
    "rectangle_area": rectangle_area,
}


class GeometryEnv(SingleTurnVisionEnv):
    """Geometry3K-shaped problems drawn locally (``vision:Geometry-v0``).

    Args:
        kinds: Which generators to draw from (default all of :data:`KINDS`), uniformly.
    """

    def __init__(self, kinds: list[str] | None = None) -> None:
        super().__init__()
        chosen = list(kinds) if kinds is not None else list(KINDS)
        unknown = [k for k in chosen if k not in KINDS]
        if unknown or not chosen:
            from gem_core.errors import ConfigError

            raise ConfigError(f"unknown geometry kinds {unknown or chosen}; choose from {sorted(KINDS)}")
        self.kinds = chosen

    def _draw_problem(self) -> Problem:
        kind = self.kinds[self.py_random.randrange(len(self.kinds))]
        return KINDS[kind](self.py_random)
