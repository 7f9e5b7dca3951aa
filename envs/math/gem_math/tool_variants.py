"""Moved to :mod:`gem_dataset_env.tool_variants` (shared with the QA and code envs); re-exported for old imports."""

from gem_dataset_env.tool_variants import tool_env

__all__ = ["tool_env"]
