r"""A loader for the real Geometry3K data (the InterGPS release), for users who have it.

The release lays out one folder per problem::

    <data_dir>/<split>/<id>/data.json        # the problem
    <data_dir>/<split>/<id>/img_diagram.png  # its diagram

and ``data.json`` holds (among other fields, which are ignored) ``problem_text``
(``"Find x."``), ``choices`` (four answer strings) and ``answer`` (the letter of the correct
choice, ``"A"`` to ``"D"``). Nothing is downloaded: point ``data_dir`` at the unpacked folder.

The reply is graded on its last ``\boxed{}``: the correct letter, or exactly the text of the
correct choice (when no other choice has the same text). Anything else scores 0, a reply
without a box -0.1.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from gem_core.core import Env, ResetReturn, StepReturn, require_text_action
from gem_core.errors import ConfigError
from gem_core.multimodal import Content, Image
from gem_games._base import extract_boxed

from gem_vision._base import REWARD_CORRECT, REWARD_FORMAT_ERROR, REWARD_WRONG, parse_label

__all__ = ["Geometry3KEnv", "Geometry3KProblem", "load_split"]

_LETTERS = "ABCD"


@dataclass(frozen=True)
class Geometry3KProblem:
    """One problem of the release."""

    id: str
    text: str
    choices: tuple[str, ...]
    answer: str  # a letter
    diagram: Image


def _problem(folder: str) -> Geometry3KProblem:
    path = os.path.join(folder, "data.json")
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable Geometry3K data.json ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a Geometry3K data.json is a JSON object, got {type(data).__name__}")
    text, choices, answer = data.get("problem_text"), data.get("choices"), data.get("answer")
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{path}: 'problem_text' must be a non-empty string, got {text!r}")
    if not (isinstance(choices, list) and len(choices) == len(_LETTERS) and all(isinstance(c, str) for c in choices)):
        raise ConfigError(f"{path}: 'choices' must be a list of {len(_LETTERS)} strings, got {choices!r}")
    if not (isinstance(answer, str) and answer in _LETTERS):
        raise ConfigError(f"{path}: 'answer' must be one of {list(_LETTERS)}, got {answer!r}")
    diagram = Image.from_path(os.path.join(folder, "img_diagram.png"))
    problem_id = str(data.get("id", os.path.basename(folder)))
    return Geometry3KProblem(problem_id, text.strip(), tuple(choices), answer, diagram)


def load_split(data_dir: str | os.PathLike[str], split: str = "train") -> list[Geometry3KProblem]:
    """Every problem of one split, ordered by numeric id; images stay on disk (path images).

    Raises:
        ConfigError: The split folder is missing or empty, or a ``data.json`` is malformed (named).
        ImageError: A problem's ``img_diagram.png`` is missing or not an image.
    """
    root = os.path.join(os.fspath(data_dir), split)
    if not os.path.isdir(root):
        raise ConfigError(
            f"no Geometry3K split folder {root!r}: data_dir must hold train/, val/ and test/ with one folder "
            "per problem (data.json and img_diagram.png)"
        )
    names = sorted((n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n))), key=_numeric_first)
    if not names:
        raise ConfigError(f"the Geometry3K split folder {root!r} holds no problem folders")
    return [_problem(os.path.join(root, name)) for name in names]


def _numeric_first(name: str) -> tuple[int, int | str]:
    return (0, int(name)) if name.isdigit() else (1, name)


class Geometry3KEnv(Env):
    """Geometry3K problems from a local copy (``vision:Geometry3K-v0``), single turn.

    Args:
        data_dir: The unpacked release (holding ``train/``, ``val/``, ``test/``).
        split: Which split.

    ``reset(seed=...)`` draws a problem from the env's RNG; ``reset(options={"index": i})``
    takes problem ``i`` of the split (for evaluation in order).
    """

    metadata = {"multi_turn": False}

    def __init__(self, data_dir: str, split: str = "train") -> None:
        self.problems = load_split(data_dir, split)
        self.problem: Geometry3KProblem | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        index = (options or {}).get("index")
        if index is None:
            index = self.py_random.randrange(len(self.problems))
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.problems):
            raise ConfigError(f"options['index'] must be an int in [0, {len(self.problems)}), got {index!r}")
        self.problem = problem = self.problems[index]
        listed = "\n".join(f"{letter}. {choice}" for letter, choice in zip(_LETTERS, problem.choices, strict=True))
        text = (
            f"{problem.text}\nChoices:\n{listed}\n"
            "Answer with the letter of the correct choice inside \\boxed{...}, e.g. \\boxed{A}."
        )
        return Content(problem.diagram, text), {"problem_id": problem.id, "index": index}

    def step(self, action: str) -> StepReturn:
        require_text_action(self, action, "the reply, with the choice's letter in \\boxed{...}")
        assert self.problem is not None
        boxed = extract_boxed(action)
        info: dict[str, Any] = {"answer": self.problem.answer, "format_error": boxed is None}
        if boxed is None:
            info.update(correct=False, success=False, parsed_action="")
            return "No \\boxed{} answer found.", REWARD_FORMAT_ERROR, True, False, info
        correct = self._is_correct(boxed)
        info.update(correct=correct, success=correct, parsed_action=boxed)
        return ("Correct." if correct else "Wrong."), REWARD_CORRECT if correct else REWARD_WRONG, True, False, info

    def _is_correct(self, boxed: str) -> bool:
        assert self.problem is not None
        given = parse_label(boxed)
        if given.upper().rstrip(".") == self.problem.answer and len(given.rstrip(".")) == 1:
            return True
        right = parse_label(self.problem.choices[_LETTERS.index(self.problem.answer)])
        same_text = sum(parse_label(c) == right for c in self.problem.choices)
        return same_text == 1 and given == right

    def sample_random_action(self) -> str:
        return f"\\boxed{{{self.py_random.choice(_LETTERS)}}}"
