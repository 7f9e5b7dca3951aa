"""Single-turn math env: a question from a dataset, the answer graded by math-verify."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from gem_math.grading import get_grading_pool
from gem_math.single_turn import DatasetEnv, DatasetEnvConfig

__all__ = ["MATH_PROMPT", "MathEnv", "MathEnvConfig"]

MATH_PROMPT = "{question}\nPlease reason step by step, and put your final answer within \\boxed{}."


class MathEnvConfig(DatasetEnvConfig):
    """Configuration of :class:`MathEnv` (see :class:`~gem_math.single_turn.DatasetEnvConfig` for the data fields).

    Attributes:
        grading_timeout_s: Per-answer limit for the symbolic check; slower answers count as wrong.
    """

    prompt: str = MATH_PROMPT
    grading_timeout_s: float = Field(1.0, gt=0)


class MathEnv(DatasetEnv):
    r"""Answer a math question; reward 1 when the ``\boxed{}`` answer is equivalent to the reference.

    Grading runs in the process-wide :func:`~gem_math.grading.get_grading_pool`, so instances
    are cheap and safe to step from threads. ``info`` gets ``success``, ``format_error``
    (no ``\boxed{}``), ``parsed_action`` (the extracted answer), ``answer`` (the reference) and
    ``grading_timed_out``.
    """

    config_model: ClassVar[type[DatasetEnvConfig]] = MathEnvConfig
    config: MathEnvConfig

    def score(self, action: str, row: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        gold = str(row[self.config.answer_column])
        result = get_grading_pool().grade(action, gold, timeout=self.config.grading_timeout_s)
        info: dict[str, Any] = {
            "success": result.correct,
            "format_error": result.format_error,
            "answer": gold,
            "grading_timed_out": result.timed_out,
        }
        if result.answer is not None:
            info["parsed_action"] = result.answer
        if result.format_error:
            return self.config.format_error_reward, info
        return (1.0 if result.correct else 0.0), info

    def sample_random_action(self) -> str:
        return f"The answer is \\boxed{{{self.py_random.randint(0, 20)}}}."
