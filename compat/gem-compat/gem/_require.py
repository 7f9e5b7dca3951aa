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


#: Why GEM's multi-agent modules (``gem.multiagent``, ``gem.envs.multiagent``) are not provided.
NO_MULTIAGENT = (
    "GEM's multi-agent API (MultiAgentEnv, AgentSelector) is not provided by gem-compat: GEM registered no "
    "multi-agent ids and its MultiAgentEnv.reset(seed=...) fails in GEM 0.1 itself. On gem-core, give each agent "
    "its own env and episode (gem_core.episode.EpisodeEngine) and exchange messages in your own loop; see "
    "docs/migrating-from-gem.md#multi-agent."
)
