"""gem-math's registrations: GEM's math and math-eval ids plus an offline sample (imports nothing heavy)."""

from __future__ import annotations

from typing import Any

from gem_core.hookspecs import hookimpl
from gem_core.registry import EnvSpec

_ENV = "gem_math.env:MathEnv"

#: ``(id, hub dataset, split, description)`` for GEM's math ids (columns ``problem``/``answer``).
HUB_DATASETS: tuple[tuple[str, str, str, str], ...] = (
    ("math:ASDiv2K", "axon-rl/ASDIV-2k", "train", "ASDiv word problems (2k)."),
    ("math:GSM8K", "axon-rl/GSM-8k", "train", "GSM8K grade-school word problems."),
    ("math:Math12K", "axon-rl/MATH-12k", "train", "MATH competition problems (12k)."),
    ("math:Math8K-3to5", "axon-rl/MATH-lvl3to5-8k", "train", "MATH levels 3 to 5 (8k)."),
    ("math:Orz57K", "axon-rl/ORZ-57k", "train", "Open-Reasoner-Zero math mix (57k)."),
    ("math:DeepScaleR40K", "axon-rl/DeepScaleR-40K", "train", "DeepScaleR math mix (40k)."),
    ("eval:MATH500", "axon-rl/math-eval", "math", "MATH500 evaluation set."),
    ("eval:AMC", "axon-rl/math-eval", "amc", "AMC evaluation set."),
    ("eval:OlympiadBench", "axon-rl/math-eval", "olympiad_bench", "OlympiadBench evaluation set."),
    ("eval:Minerva", "axon-rl/math-eval", "minerva", "Minerva math evaluation set."),
    ("eval:AIME24", "axon-rl/math-eval", "aime24", "AIME 2024 evaluation set."),
)

#: Tool-using variant: the python tool through gem_core's tool wrapper.
PYTHON_TOOL = ("tools", {"tools": ["python"]})


def _sample_kwargs() -> dict[str, Any]:
    from gem_math.data import sample_path  # light: pathlib only

    return {"path": sample_path("math.jsonl")}


def math_specs() -> list[EnvSpec]:
    """Every math env spec (hub datasets and the shipped sample)."""
    specs = [
        EnvSpec(
            id=env_id,
            entry_point=_ENV,
            kwargs={"path": path, "split": split, "label": env_id},
            description=f"{text} Hub dataset {path} (split {split}); pass path= for a local copy.",
            tags=("single-turn", "math", "hub", "eval" if env_id.startswith("eval:") else "train"),
            cpu_bound=True,
        )
        for env_id, path, split, text in HUB_DATASETS
    ]
    specs.append(
        EnvSpec(
            id="math:Sample-v0",
            entry_point=_ENV,
            kwargs={**_sample_kwargs(), "label": "math:Sample-v0"},
            description="24 math problems shipped with gem-math (fractions, intervals, sets); runs offline.",
            tags=("single-turn", "math", "offline"),
            cpu_bound=True,
        )
    )
    return specs


@hookimpl
def register_envs() -> list[EnvSpec]:
    return math_specs()
