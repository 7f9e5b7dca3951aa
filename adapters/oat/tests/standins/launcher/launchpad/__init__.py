"""Stand-in for dm-launchpad (no wheel for this Python): oat imports it at module level only."""

from __future__ import annotations

from typing import Any


class _NotAvailable:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("launchpad is a test stand-in here; install dm-launchpad on the GPU machine")


Program = _NotAvailable


def launch(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("launchpad is a test stand-in here; install dm-launchpad on the GPU machine")


def stop() -> None:
    """Oat's plasma server calls this when it shuts down."""
