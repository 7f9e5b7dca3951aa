r"""What the vision envs share: drawing to PNG, grading a boxed answer, the single-turn env.

Answers are graded strictly, as a contract with an adversary: only the content of the
*last* ``\boxed{...}`` counts, and it must be one number (or one label) and nothing else.
A hedge (``\boxed{30 or 40}``, ``\boxed{A, B}``), an expression (``\boxed{90-50}``), a
non-finite number or an empty box scores 0.
"""

from __future__ import annotations

import abc
import io
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gem_core.core import Env, ResetReturn, StepReturn, require_text_action
from gem_core.multimodal import Content, Image
from gem_games._base import extract_boxed
from PIL import Image as PILImage
from PIL import ImageDraw, ImageFont

__all__ = [
    "Problem",
    "SingleTurnVisionEnv",
    "font",
    "grade",
    "parse_label",
    "parse_number",
    "to_image",
]

#: Rewards of the single-turn vision envs.
REWARD_CORRECT = 1.0
REWARD_WRONG = 0.0
REWARD_FORMAT_ERROR = -0.1

# one plain decimal, with the decorations people write around an answer
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_PREFIX = re.compile(r"^[a-z]\s*=\s*", re.I)
_SUFFIX = re.compile(r"\s*(?:\^\s*\{?\\circ\}?|°|\\%|%|degrees?|units?|square units|cm|m)$", re.I)


def font(size: int = 14) -> Any:
    """Pillow's built-in font at ``size`` points (no font files needed)."""
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1 has only the fixed bitmap font
        return ImageFont.load_default()


def to_image(picture: PILImage.Image) -> Image:
    """Encode a Pillow picture as PNG into a :class:`gem_core.multimodal.Image`."""
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG", optimize=True)
    return Image.from_bytes(buffer.getvalue())


def canvas(width: int, height: int) -> tuple[PILImage.Image, ImageDraw.ImageDraw]:
    """A white RGB picture and its drawing context."""
    picture = PILImage.new("RGB", (width, height), "white")
    return picture, ImageDraw.Draw(picture)


def parse_number(content: str) -> Fraction | None:
    r"""The one number in a boxed answer (``40``, ``x = 40``, ``40^\circ``, ``12.5\%``), exactly, else ``None``."""
    text = _PREFIX.sub("", content.strip())
    text = _SUFFIX.sub("", text).strip()
    if _NUMBER.fullmatch(text) is None:
        return None
    return Fraction(text)


def parse_label(content: str) -> str:
    r"""A boxed label answer, normalised (case, spaces, surrounding ``\text{}``)."""
    text = content.strip()
    match = re.fullmatch(r"\\text\{(.*)\}", text)
    if match:
        text = match.group(1)
    return " ".join(text.split()).lower()


def grade(action: str, answer: Fraction | str) -> tuple[float, dict[str, Any]]:
    """Reward and info of a reply against the exact ``answer`` (a number or a label).

    Returns:
        ``(reward, info)`` with ``info["correct"]``, ``info["format_error"]`` and
        ``info["parsed_action"]``.
    """
    boxed = extract_boxed(action)
    if boxed is None:
        return REWARD_FORMAT_ERROR, {"correct": False, "format_error": True, "parsed_action": ""}
    if isinstance(answer, Fraction):
        correct = parse_number(boxed) == answer
    else:
        correct = parse_label(boxed) == parse_label(answer)
    reward = REWARD_CORRECT if correct else REWARD_WRONG
    return reward, {"correct": correct, "format_error": False, "parsed_action": boxed, "success": correct}


def answer_text(answer: Fraction | str) -> str:
    """How an answer is written (``40``, ``12.5``, ``Apples``)."""
    if isinstance(answer, str):
        return answer
    return str(answer.numerator) if answer.denominator == 1 else str(float(answer))


@dataclass
class Problem:
    """One drawn problem: what the model reads and sees, and the exact answer.

    Attributes:
        text: The question (never the answer: the numbers needed are only in the picture).
        image: The drawing.
        answer: A number (exact) or a label.
        kind: Which generator made it (in ``info``).
        facts: What was drawn (for tests and debugging, in ``info``).
    """

    text: str
    image: Image
    answer: Fraction | str
    kind: str
    facts: dict[str, Any] = field(default_factory=dict)


class SingleTurnVisionEnv(Env, abc.ABC):
    r"""A picture and a question; one reply, graded against the exact answer.

    Reward: 1.0 correct, 0.0 wrong, -0.1 without a ``\boxed{}`` (format error); the episode
    always ends after the one step (``terminated``).
    """

    metadata = {"multi_turn": False}
    instruction = "Answer with the final answer only inside \\boxed{...}."

    def __init__(self) -> None:
        self.problem: Problem | None = None

    @abc.abstractmethod
    def _draw_problem(self) -> Problem:
        """A new problem from :attr:`np_random` / :attr:`py_random`."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        self.problem = self._draw_problem()
        obs = Content(self.problem.image, f"{self.problem.text}\n{self.instruction}")
        return obs, {"kind": self.problem.kind}

    def step(self, action: str) -> StepReturn:
        require_text_action(self, action, "the reply, with the answer in \\boxed{...}")
        assert self.problem is not None
        reward, info = grade(action, self.problem.answer)
        info["answer"] = answer_text(self.problem.answer)
        verdict = "Correct." if info["correct"] else "Wrong."
        if info["format_error"]:
            verdict = "No \\boxed{} answer found."
        return verdict, reward, True, False, info

    def sample_random_action(self) -> str:
        return f"\\boxed{{{self.py_random.randint(0, 100)}}}"
