"""Errors of the dataset envs (``gem_core.errors.DatasetUnavailable`` still resolves here, for old imports)."""

from __future__ import annotations

from gem_core.errors import GemCoreError

__all__ = ["DatasetUnavailable"]


class DatasetUnavailable(GemCoreError, OSError):
    """A dataset env could not load its data (hub unreachable, missing local file); says how to use a local copy."""
