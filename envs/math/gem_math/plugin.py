"""gem-math's registrations: GEM's math and math-eval ids plus an offline sample (imports nothing heavy)."""

from __future__ import annotations

from gem_core.hookspecs import hookimpl
from gem_core.registry import EnvSpec, PluginManifest
from gem_math.specs import PYTHON_TOOL_DEFAULTS, HubDataset, dataset_spec, hub_specs, tool_variant

_ENV = "gem_math.env:MathEnv"

#: ``(id, hub dataset, split, description)`` for GEM's math ids (columns ``problem``/``answer``).
HUB_DATASETS: tuple[HubDataset, ...] = (
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


def math_specs() -> list[EnvSpec]:
    """Every math env spec (hub datasets and the shipped sample)."""
    from gem_math.data import sample_path  # light: pathlib only

    plain = [
        *hub_specs(HUB_DATASETS, _ENV, "math", cpu_bound=True),
        dataset_spec(
            "math:Sample-v0",
            _ENV,
            {"path": sample_path("math.jsonl")},
            "24 math problems shipped with gem-math (fractions, intervals, sets); runs offline.",
            ("single-turn", "math", "offline"),
            cpu_bound=True,
        ),
    ]
    # Every math id also comes with the python tool: `math:GSM8K-python`, `eval:AIME24-python`...
    return plain + [tool_variant(spec, "python", ["python"], PYTHON_TOOL_DEFAULTS) for spec in plain]


@hookimpl
def plugin_manifest() -> PluginManifest:
    # The ids in these namespaces are this package's; another distribution's there are refused.
    return PluginManifest(api_version=1, namespaces=("math",))


@hookimpl
def register_envs() -> list[EnvSpec]:
    return math_specs()
