"""gem-qa's registrations: GEM's QA, QA-eval and RuleTaker logic ids plus offline samples (imports nothing heavy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gem_core.hookspecs import hookimpl
from gem_core.registry import EnvSpec

_ENV = "gem_qa.env:QaEnv"
_SAMPLES = Path(__file__).parent / "samples"

#: ``(id, hub dataset, split, question column, description)``; answers are in column ``answer``.
HUB_DATASETS: tuple[tuple[str, str, str, str, str], ...] = (
    ("qa:NaturalQuestions", "axon-rl/NaturalQuestions", "train", "problem", "Natural Questions (open-domain)."),
    ("qa:HotpotQA", "axon-rl/HotpotQA", "train", "problem", "HotpotQA multi-hop questions."),
    ("eval:QaOpen", "google-research-datasets/nq_open", "validation", "question", "NQ-Open validation set."),
    ("eval:2Wiki", "axon-rl/search-eval", "2wiki", "question", "2WikiMultihopQA, 512 questions."),
    ("eval:PopQA", "axon-rl/search-eval", "popqa", "question", "PopQA, 512 questions."),
    ("eval:TriviaQA", "axon-rl/search-eval", "tq", "question", "TriviaQA, 512 questions."),
    ("eval:HotpotQA", "axon-rl/search-eval", "hotpotqa", "question", "HotpotQA, 512 questions."),
    ("eval:Bamboogle", "axon-rl/search-eval", "bamboogle", "question", "Bamboogle, 512 questions."),
    ("eval:NaturalQuestions", "axon-rl/search-eval", "nq", "question", "Natural Questions, 512 questions."),
    ("eval:Musique", "axon-rl/search-eval", "musique", "question", "MuSiQue, 512 questions."),
)


def _spec(env_id: str, kwargs: dict[str, Any], description: str, tags: tuple[str, ...]) -> EnvSpec:
    return EnvSpec(id=env_id, entry_point=_ENV, kwargs={**kwargs, "label": env_id}, description=description, tags=tags)


def qa_specs() -> list[EnvSpec]:
    """Every QA and logic env spec."""
    specs = [
        _spec(
            env_id,
            {"path": path, "split": split, "question_column": question},
            f"{text} Hub dataset {path} (split {split}); pass path= for a local copy.",
            ("single-turn", "qa", "hub", "eval" if env_id.startswith("eval:") else "train"),
        )
        for env_id, path, split, question, text in HUB_DATASETS
    ]
    specs += [
        _spec(
            f"logic:RuleTaker-d{depth}",
            {"path": f"axon-rl/RuleTaker-d{depth}-70k", "answer_format": "boxed"},
            f"RuleTaker deduction, depth {depth}: True/False in a box. Hub dataset axon-rl/RuleTaker-d{depth}-70k.",
            ("single-turn", "logic", "hub", "train"),
        )
        for depth in (0, 1, 2, 3, 5)
    ]
    specs += [
        _spec(
            "qa:Sample-v0",
            {"path": str(_SAMPLES / "qa.jsonl")},
            "16 trivia questions shipped with gem-qa; runs offline.",
            ("single-turn", "qa", "offline"),
        ),
        _spec(
            "logic:Sample-v0",
            {"path": str(_SAMPLES / "logic.jsonl"), "answer_format": "boxed"},
            "8 rule-deduction questions shipped with gem-qa (RuleTaker format); runs offline.",
            ("single-turn", "logic", "offline"),
        ),
    ]
    return specs


@hookimpl
def register_envs() -> list[EnvSpec]:
    return qa_specs()
