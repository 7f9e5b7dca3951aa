"""Builds the specs of hub-backed dataset envs (light: used by the plugin modules of math, QA and code)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gem_core.registry import EnvSpec

__all__ = ["PYTHON_TOOL_DEFAULTS", "SEARCH_TOOL_DEFAULTS", "HubDataset", "dataset_spec", "hub_specs", "tool_variant"]

#: Math with python: a response with a ``\\boxed{}`` answer is final (its calls are not run).
PYTHON_TOOL_DEFAULTS: dict[str, Any] = {
    "max_tool_calls": 5,
    "answer_pattern": r"\\boxed\{",
    "answer_with_calls": "env",
}
#: QA with search: a response with an ``<answer>`` is final.
SEARCH_TOOL_DEFAULTS: dict[str, Any] = {
    "max_tool_calls": 5,
    "answer_pattern": r"<answer>",
    "answer_with_calls": "env",
}

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


def tool_variant(spec: EnvSpec, suffix: str, tools: list[str], defaults: dict[str, Any]) -> EnvSpec:
    """The ``<id>-<suffix>`` spec: ``spec``'s env given ``tools`` by :func:`gem_dataset_env.tool_variants.tool_env`.

    Args:
        spec: The plain env's spec.
        suffix: Appended to the id, e.g. ``"python"``.
        tools: Registered tool names.
        defaults: The variant's tool-wrapper settings (``PYTHON_TOOL_DEFAULTS``...).
    """
    env_id = f"{spec.id}-{suffix}"
    kwargs = {k: v for k, v in spec.kwargs.items() if k != "label"}
    return EnvSpec(
        id=env_id,
        entry_point="gem_dataset_env.tool_variants:tool_env",
        kwargs={**kwargs, "label": env_id, "env": spec.entry_point, "tools": tools, "tool_defaults": defaults},
        description=f"{spec.description} With the {', '.join(tools)} tool.",
        tags=(*spec.tags, "tool", *tools),
        cpu_bound=spec.cpu_bound,
    )
