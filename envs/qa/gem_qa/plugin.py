"""gem-qa's registrations: GEM's QA, QA-eval and RuleTaker logic ids plus offline samples (imports nothing heavy)."""

from __future__ import annotations

from pathlib import Path

from gem_core.hookspecs import hookimpl
from gem_core.registry import EnvSpec, PluginManifest
from gem_dataset_env.specs import SEARCH_TOOL_DEFAULTS, HubDataset, dataset_spec, hub_specs, tool_variant

_ENV = "gem_qa.env:QaEnv"
_SAMPLES = Path(__file__).parent / "samples"

#: ``(id, hub dataset, split, description)``; answers are in column ``answer``.
HUB_DATASETS: tuple[HubDataset, ...] = (
    ("qa:NaturalQuestions", "axon-rl/NaturalQuestions", "train", "Natural Questions (open-domain)."),
    ("qa:HotpotQA", "axon-rl/HotpotQA", "train", "HotpotQA multi-hop questions."),
    ("eval:QaOpen", "google-research-datasets/nq_open", "validation", "NQ-Open validation set."),
    ("eval:2Wiki", "axon-rl/search-eval", "2wiki", "2WikiMultihopQA, 512 questions."),
    ("eval:PopQA", "axon-rl/search-eval", "popqa", "PopQA, 512 questions."),
    ("eval:TriviaQA", "axon-rl/search-eval", "tq", "TriviaQA, 512 questions."),
    ("eval:HotpotQA", "axon-rl/search-eval", "hotpotqa", "HotpotQA, 512 questions."),
    ("eval:Bamboogle", "axon-rl/search-eval", "bamboogle", "Bamboogle, 512 questions."),
    ("eval:NaturalQuestions", "axon-rl/search-eval", "nq", "Natural Questions, 512 questions."),
    ("eval:Musique", "axon-rl/search-eval", "musique", "MuSiQue, 512 questions."),
)
#: GEM's training sets keep the question in ``problem``; the eval sets in ``question`` (QaEnv's default).
_PROBLEM_COLUMN = {"question_column": "problem"}
RULETAKER: tuple[HubDataset, ...] = tuple(
    (f"logic:RuleTaker-d{d}", f"axon-rl/RuleTaker-d{d}-70k", "train", f"RuleTaker deduction, depth {d}: True/False.")
    for d in (0, 1, 2, 3, 5)
)


def qa_specs() -> list[EnvSpec]:
    """Every QA and logic env spec."""
    offline = {
        "qa:Sample-v0": ("qa.jsonl", {}, "16 trivia questions shipped with gem-qa; runs offline."),
        "logic:Sample-v0": (
            "logic.jsonl",
            {"answer_format": "boxed"},
            "8 rule-deduction questions shipped with gem-qa (RuleTaker format); runs offline.",
        ),
    }
    qa = hub_specs(
        HUB_DATASETS, _ENV, "qa", extra={"qa:NaturalQuestions": _PROBLEM_COLUMN, "qa:HotpotQA": _PROBLEM_COLUMN}
    )
    logic = hub_specs(RULETAKER, _ENV, "logic", extra={i: {"answer_format": "boxed"} for i, *_ in RULETAKER})
    samples = [
        dataset_spec(
            env_id,
            _ENV,
            {"path": str(_SAMPLES / file), **kw},
            text,
            ("single-turn", env_id[: env_id.index(":")], "offline"),
            False,
        )
        for env_id, (file, kw, text) in offline.items()
    ]
    # Every QA id (not the True/False logic ones) also comes with the search tool: `qa:HotpotQA-search`...
    with_search = [
        tool_variant(spec, "search", ["search"], SEARCH_TOOL_DEFAULTS) for spec in (*qa, *samples) if "qa" in spec.tags
    ]
    return [*qa, *logic, *samples, *with_search]


@hookimpl
def plugin_manifest() -> PluginManifest:
    # The ids in these namespaces are this package's; another distribution's there are refused.
    return PluginManifest(api_version=1, namespaces=("qa", "logic"))


@hookimpl
def register_envs() -> list[EnvSpec]:
    return qa_specs()
