"""Builds the specs of hub-backed dataset envs (light: used by the plugin modules of math, QA and code)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gem_core.registry import EnvSpec

__all__ = ["HubDataset", "dataset_spec", "hub_specs"]

#: ``(env id, hub dataset, split, description)``.
HubDataset = tuple[str, str, str, str]


def dataset_spec(
    env_id: str, entry_point: str, kwargs: dict[str, Any], description: str, tags: tuple[str, ...], cpu_bound: bool
) -> EnvSpec:
    """One dataset env spec; ``label`` (the id, for error messages) is added to the kwargs."""
    return EnvSpec(
        id=env_id,
        entry_point=entry_point,
        kwargs={**kwargs, "label": env_id},
        description=description,
        tags=tags,
        cpu_bound=cpu_bound,
    )


def hub_specs(
    rows: Iterable[HubDataset],
    entry_point: str,
    kind: str,
    *,
    cpu_bound: bool = False,
    extra: dict[str, dict[str, Any]] | None = None,
) -> list[EnvSpec]:
    """Specs for hub datasets; ``extra`` adds kwargs per env id (e.g. another question column)."""
    return [
        dataset_spec(
            env_id,
            entry_point,
            {"path": path, "split": split, **(extra or {}).get(env_id, {})},
            f"{text} Hub dataset {path} (split {split}); pass path= for a local copy.",
            ("single-turn", kind, "hub", "eval" if env_id.startswith("eval:") else "train"),
            cpu_bound,
        )
        for env_id, path, split, text in rows
    ]
