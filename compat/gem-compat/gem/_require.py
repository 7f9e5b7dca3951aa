"""Import a gem package that a GEM module path maps onto, or say which distribution to install."""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, distribution: str, gem_path: str) -> ModuleType:
    """``importlib.import_module(module)``; an ImportError names the distribution that provides it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module.startswith(exc.name.split(".")[0]):
            raise
        raise ImportError(f"{gem_path} is provided by {distribution} on gem-core: pip install {distribution}") from exc
