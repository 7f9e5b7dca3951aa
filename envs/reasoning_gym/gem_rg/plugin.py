"""Registers ``rg:<name>`` for every dataset of the pinned reasoning-gym, without importing it."""

from __future__ import annotations

from typing import Any

from gem_core.hookspecs import hookimpl
from gem_core.registry import EnvSpec, PluginManifest
from gem_rg.names import DATASET_NAMES, REASONING_GYM_VERSION

#: ``composite`` mixes other datasets and has no default mix; this one makes ``rg:composite`` usable as is.
COMPOSITE_DEFAULT: dict[str, Any] = {
    "datasets": [
        {"name": "chain_sum", "weight": 1.0, "config": {}},
        {"name": "leg_counting", "weight": 1.0, "config": {}},
        {"name": "spell_backward", "weight": 1.0, "config": {}},
    ]
}


@hookimpl
def plugin_manifest() -> PluginManifest:
    # The ids in these namespaces are this package's; another distribution's there are refused.
    return PluginManifest(api_version=1, namespaces=("rg",))


@hookimpl
def register_envs() -> list[EnvSpec]:
    return [
        EnvSpec(
            id=f"rg:{name}",
            entry_point="gem_rg.env:ReasoningGymEnv",
            kwargs={"name": name, **({"config": COMPOSITE_DEFAULT} if name == "composite" else {})},
            description=f"reasoning-gym {REASONING_GYM_VERSION} dataset {name!r}, procedurally generated.",
            tags=("single-turn", "reasoning-gym", "offline"),
        )
        for name in DATASET_NAMES
    ]
