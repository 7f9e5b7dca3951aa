"""Single-turn QA env: answer in ``<answer>`` tags, scored by exact match or F1 after normalisation."""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar, Literal

from gem_dataset_env.answers import extract_boxed
from gem_dataset_env.single_turn import DatasetEnv, DatasetEnvConfig
from gem_qa.scoring import best_exact_match, best_f1

__all__ = ["QA_PROMPT", "QaEnv", "QaEnvConfig", "extract_tagged_answer", "reference_answers"]

QA_PROMPT = (
    "Answer the question. Think inside <think></think> tags first, then give only the final short answer "
    "inside <answer></answer> tags, e.g. <answer>Paris</answer>.\nQuestion: {question}"
)
BOXED_PROMPT = "{question}\nThink step by step, then put your final answer within \\boxed{}."

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def extract_tagged_answer(response: str) -> str | None:
    """Content of the last ``<answer>...</answer>``, or ``None``."""
    found = _ANSWER_RE.findall(response)
    return str(found[-1]).strip() if found else None


def reference_answers(value: Any) -> list[str]:
    """Reference answers from a dataset cell: a string, a JSON list in a string, or a list."""
    if isinstance(value, str):
        if value.startswith("["):
            try:
                decoded = json.loads(value)
            except json.JSONDecodeError:
                return [value]
            if isinstance(decoded, list):
                return [str(v) for v in decoded]
        return [value]
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        return [str(v) for v in (value.tolist() if hasattr(value, "tolist") else value)]
    return [str(value)]


class QaEnvConfig(DatasetEnvConfig):
    r"""Configuration of :class:`QaEnv` (data fields in :class:`~gem_dataset_env.single_turn.DatasetEnvConfig`).

    Attributes:
        metric: ``"em"`` rewards 1 for an exact match, ``"f1"`` rewards the token F1 (both are in ``info``).
        answer_format: ``"answer_tag"`` reads ``<answer>...</answer>``; ``"boxed"`` reads ``\boxed{...}``.
        prompt: Observation template with ``{question}``; empty picks the one matching ``answer_format``.
    """

    question_column: str = "question"
    prompt: str = ""
    metric: Literal["em", "f1"] = "em"
    answer_format: Literal["answer_tag", "boxed"] = "answer_tag"


class QaEnv(DatasetEnv):
    """Answer a question; reward by exact match (default) or token F1 against every reference answer.

    ``info`` gets ``em``, ``f1``, ``success`` (exact match), ``format_error`` (no answer found),
    ``parsed_action`` and ``answer`` (the references).
    """

    config_model: ClassVar[type[DatasetEnvConfig]] = QaEnvConfig
    config: QaEnvConfig

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not self.config.prompt:
            default = BOXED_PROMPT if self.config.answer_format == "boxed" else QA_PROMPT
            self.config = self.config.model_copy(update={"prompt": default})

    def extract(self, action: str) -> str | None:
        """The model's final answer in the configured format."""
        if self.config.answer_format == "boxed":
            boxed = extract_boxed(action)
            return boxed[-1] if boxed else None
        return extract_tagged_answer(action)

    def score(self, action: str, row: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        references = reference_answers(row[self.config.answer_column])
        answer = self.extract(action)
        info: dict[str, Any] = {"answer": references, "format_error": answer is None}
        if answer is None:
            info.update(success=False, em=0.0, f1=0.0)
            return self.config.format_error_reward, info
        em, f1 = best_exact_match(answer, references), best_f1(answer, references)
        info.update(parsed_action=answer, success=em, em=float(em), f1=f1)
        return (float(em) if self.config.metric == "em" else f1), info

    def sample_random_action(self) -> str:
        words = ("paris", "1905", "blue whale", "the moon", "unknown")
        word = words[self.py_random.randrange(len(words))]
        return f"\\boxed{{{word}}}" if self.config.answer_format == "boxed" else f"<answer>{word}</answer>"
