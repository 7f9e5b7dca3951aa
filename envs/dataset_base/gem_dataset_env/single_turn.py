"""A single-turn env over a dataset split: reset shows one question, step grades one answer.

Shared by the math, QA and code envs. Subclasses define a config model (extending
:class:`DatasetEnvConfig`) and :meth:`DatasetEnv.score`.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from gem_core.core import Env, ResetReturn, StepReturn, require_text_action
from gem_core.errors import ConfigError, ResetNeeded
from gem_core.registry import format_config_error
from gem_dataset_env.data import load_split

__all__ = ["DatasetEnv", "DatasetEnvConfig"]


class DatasetEnvConfig(BaseModel):
    """Where the data comes from and how rows map to questions.

    Attributes:
        path: Hugging Face dataset id, local JSONL/Parquet file or directory, or a builder
            name (``"json"``, ``"parquet"``) together with ``data_files``.
        split: Split to use (ignored for a single local file).
        name: Dataset configuration (subset) on the hub.
        data_files: Files for a builder ``path``.
        question_column: Column holding the question text.
        answer_column: Column holding the reference answer.
        prompt: Observation template; ``{question}`` is replaced by the question.
        format_error_reward: Reward when no answer can be extracted from the response.
        label: The env id, shown in error messages (set by the registered specs).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    split: str = "train"
    name: str | None = None
    data_files: str | list[str] | None = None
    question_column: str = "problem"
    answer_column: str = "answer"
    prompt: str = "{question}"
    format_error_reward: float = 0.0
    label: str | None = None


class DatasetEnv(Env):
    """Single-turn dataset env (a contextual bandit).

    ``reset(seed=s)`` picks a row with the env's RNG; ``reset(options={"index": i})`` shows
    row ``i`` (for evaluation, iterate ``i`` over ``range(len(env))``). ``step`` grades the
    response and ends the episode (``terminated=True``). The loaded split is shared by every
    instance in the process.
    """

    metadata: ClassVar[dict[str, Any]] = {"multi_turn": False}
    config_model: ClassVar[type[DatasetEnvConfig]] = DatasetEnvConfig

    def __init__(self, **kwargs: Any) -> None:
        try:
            self.config = self.config_model(**kwargs)
        except ValidationError as exc:
            raise ConfigError(format_config_error(f"configuration of {type(self).__name__}", exc)) from exc
        cfg = self.config
        self.data = load_split(cfg.path, split=cfg.split, name=cfg.name, data_files=cfg.data_files, env_id=cfg.label)
        missing = [c for c in self.required_columns() if c not in self.data.column_names]
        if missing:
            raise ConfigError(
                f"dataset {cfg.path!r} has no column(s) {missing}; its columns are {self.data.column_names}. "
                "Map them with question_column=/answer_column= (or the env's other *_column options)."
            )
        if len(self.data) == 0:
            raise ConfigError(f"dataset {cfg.path!r} (split {cfg.split!r}) is empty")
        self.row: dict[str, Any] | None = None
        self.index: int | None = None

    def required_columns(self) -> list[str]:
        """Columns the env reads; checked when the data is loaded."""
        return [self.config.question_column, self.config.answer_column]

    def __len__(self) -> int:
        return len(self.data)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        index = (options or {}).get("index")
        if index is None:
            index = int(self.np_random.integers(len(self.data)))
        elif not isinstance(index, int) or not 0 <= index < len(self.data):
            raise ConfigError(f"options['index'] must be an int in [0, {len(self.data)}), got {index!r}")
        self.index, self.row = index, self.data[index]
        question = str(self.row[self.config.question_column])
        return self.config.prompt.replace("{question}", question), {"index": index}

    def step(self, action: str) -> StepReturn:
        if self.row is None:
            raise ResetNeeded("call reset() before step(); each episode of a single-turn env has one step")
        require_text_action(self, action, "the model's whole reply, which holds its answer")
        row, self.row = self.row, None
        reward, info = self.score(action, row)
        info.setdefault("index", self.index)
        return "", float(reward), True, False, info

    @abc.abstractmethod
    def score(self, action: str, row: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        """Grade one response against its row; returns ``(reward, info)``. Must not raise."""
