"""Moved to :mod:`gem_dataset_env.specs` (shared with the QA and code envs); re-exported for old imports."""

from gem_dataset_env.specs import (
    PYTHON_TOOL_DEFAULTS,
    SEARCH_TOOL_DEFAULTS,
    HubDataset,
    dataset_spec,
    hub_specs,
    tool_variant,
)

__all__ = ["PYTHON_TOOL_DEFAULTS", "SEARCH_TOOL_DEFAULTS", "HubDataset", "dataset_spec", "hub_specs", "tool_variant"]
