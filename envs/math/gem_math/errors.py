"""gem-math's errors (``gem_core.errors.GradingError`` still resolves here, for old imports)."""

from __future__ import annotations

from gem_core.errors import GemCoreError

__all__ = ["GradingError"]


class GradingError(GemCoreError, RuntimeError):
    """The answer-grading pool cannot grade: it is closed, or a worker failed to start (says why)."""
