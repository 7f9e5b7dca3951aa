"""The Geometry3K loader on a fixture in the release's layout; forging its multiple-choice reward."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from gem_core.errors import ConfigError, ImageError
from gem_core.multimodal import Content

from gem_vision.geometry3k import Geometry3KEnv, load_split


def test_loads_every_problem_in_numeric_order_with_path_images(g3k_dir: Path) -> None:
    problems = load_split(g3k_dir, "train")
    assert [p.id for p in problems] == ["0", "1", "10"]
    assert problems[0].choices == ("30", "40", "50", "60") and problems[0].answer == "C"
    assert problems[0].diagram.path is not None and problems[0].diagram.format == "png"


@pytest.mark.parametrize(
    ("reply", "reward"),
    [
        (r"\boxed{C}", 1.0),
        (r"\boxed{c}", 1.0),
        (r"\boxed{50}", 1.0),
        (r"\boxed{A}", 0.0),
        (r"\boxed{A B C D}", 0.0),
        (r"\boxed{C or D}", 0.0),
        (r"\boxed{CD}", 0.0),
        (r"\boxed{C} \boxed{D}", 0.0),
        (r"\boxed{D} \boxed{C}", 1.0),
        (r"\boxed{30, 40, 50, 60}", 0.0),
        ("C", -0.1),
    ],
    ids=[
        "letter",
        "lowercase",
        "choice-text",
        "wrong",
        "all-letters",
        "hedge",
        "two-letters",
        "last-wrong",
        "last-right",
        "all-values",
        "no-box",
    ],
)
def test_only_the_right_choice_scores(g3k_dir: Path, reply: str, reward: float) -> None:
    env = Geometry3KEnv(str(g3k_dir))
    obs, info = env.reset(options={"index": 0})
    assert isinstance(obs, Content) and "A. 30" in obs.text and info["problem_id"] == "0"
    assert env.step(reply)[1] == reward


def test_a_choice_text_shared_by_two_choices_only_counts_as_a_letter(g3k_dir: Path) -> None:
    env = Geometry3KEnv(str(g3k_dir))
    env.reset(options={"index": 2})  # choices "5", "5", ...: the value does not say which letter
    assert env.step(r"\boxed{5}")[1] == 0.0
    env.reset(options={"index": 2})
    assert env.step(r"\boxed{A}")[1] == 1.0


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"answer": "E"}, ConfigError, "answer"),
        ({"choices": ["1", "2"]}, ConfigError, "choices"),
        ({"problem_text": ""}, ConfigError, "problem_text"),
        ("no-image", ImageError, "img_diagram.png"),
        ("no-split", ConfigError, "split folder"),
    ],
    ids=["bad-letter", "three-choices", "empty-text", "no-diagram", "no-split"],
)
def test_a_broken_release_names_what_is_wrong(
    tmp_path: Path, release_writer: Any, change: object, error: type, match: str
) -> None:
    one = {"id": 0, "problem_text": "Find x.", "choices": ["1", "2", "3", "4"], "answer": "A"}
    root = release_writer(tmp_path / "g3k", [one])
    folder = root / "train" / "0"
    if change == "no-image":
        (folder / "img_diagram.png").unlink()
    elif change == "no-split":
        root = tmp_path / "elsewhere"
    else:
        data = json.loads((folder / "data.json").read_text())
        data.update(change)  # type: ignore[call-overload]
        (folder / "data.json").write_text(json.dumps(data))
    with pytest.raises(error, match=match):
        load_split(root, "train")


def test_bad_index_is_a_config_error(g3k_dir: Path) -> None:
    env = Geometry3KEnv(str(g3k_dir))
    with pytest.raises(ConfigError, match="index"):
        env.reset(options={"index": 3})
