"""gem-code's registrations: GEM's code ids plus an offline sample (imports nothing heavy)."""

from __future__ import annotations

from pathlib import Path

from gem_core.hookspecs import hookimpl
from gem_core.registry import EnvSpec, PluginManifest
from gem_dataset_env.specs import HubDataset, dataset_spec, hub_specs

_ENV = "gem_code.env:CodeEnv"

#: ``(id, hub dataset, split, description)``; columns ``problem`` and ``tests``.
HUB_DATASETS: tuple[HubDataset, ...] = (
    ("code:CodeContest", "axon-rl/CodeContest", "train", "CodeContests problems with merged tests."),
    ("code:Taco8k", "axon-rl/TACO-8k", "train", "TACO programming problems (8k)."),
    ("code:PrimeIntellect15k", "axon-rl/PrimeIntellect-15k", "train", "PrimeIntellect verifiable code (15k)."),
    ("eval:CodeContest", "axon-rl/CodeContest", "test", "CodeContests test split."),
)


@hookimpl
def plugin_manifest() -> PluginManifest:
    # The ids in these namespaces are this package's; another distribution's there are refused.
    return PluginManifest(api_version=1, namespaces=("code",))


@hookimpl
def register_envs() -> list[EnvSpec]:
    return [
        *hub_specs(HUB_DATASETS, _ENV, "code", cpu_bound=True),
        dataset_spec(
            "code:Sample-v0",
            _ENV,
            {"path": str(Path(__file__).parent / "samples" / "code.jsonl")},
            "6 stdin/stdout problems shipped with gem-code; runs offline.",
            ("single-turn", "code", "offline"),
            cpu_bound=True,
        ),
    ]
