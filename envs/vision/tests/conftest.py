"""Fixtures: a tiny Geometry3K release written in the InterGPS layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image as PILImage
from PIL import ImageDraw

#: Three problems as the release writes them (fields the loader ignores included).
G3K_PROBLEMS = [
    {
        "id": 0,
        "problem_text": "Find x.",
        "choices": ["30", "40", "50", "60"],
        "answer": "C",
        "precise_value": [30.0, 40.0, 50.0, 60.0],
        "problem_type_graph": ["Triangle"],
        "problem_type_goal": ["Angle"],
        "source": "fixture",
    },
    {
        "id": 1,
        "problem_text": "Find the area of the parallelogram.",
        "choices": ["12", "24", "36", "48"],
        "answer": "B",
        "problem_type_graph": ["Parallelogram"],
        "problem_type_goal": ["Area"],
    },
    {
        "id": 10,
        "problem_text": "Find y.",
        "choices": ["5", "5", "7", "9"],
        "answer": "A",
    },
]


def write_release(root: Path, problems: list[dict[str, object]] = G3K_PROBLEMS, split: str = "train") -> Path:
    for problem in problems:
        folder = root / split / str(problem["id"])
        folder.mkdir(parents=True)
        (folder / "data.json").write_text(json.dumps(problem))
        picture = PILImage.new("RGB", (40, 30), "white")
        ImageDraw.Draw(picture).line([(2, 28), (38, 2)], fill="black")
        picture.save(folder / "img_diagram.png")
    return root


@pytest.fixture
def release_writer() -> object:
    """:func:`write_release`, for tests that write a broken release of their own."""
    return write_release


@pytest.fixture
def g3k_dir(tmp_path: Path) -> Path:
    return write_release(tmp_path / "geometry3k")
