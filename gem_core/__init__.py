"""gem_core: text environments for training and evaluating LLM agents with RL.

The public names below are imported lazily (PEP 562), so ``import gem_core`` costs
almost nothing and discovers no plugins; the registry is built on the first call
to :func:`make`, :func:`list_envs` and the like.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Env": "gem_core.core",
    "AsyncEnv": "gem_core.core",
    "RESERVED_INFO_KEYS": "gem_core.core",
    "to_async": "gem_core.core",
    "to_sync": "gem_core.core",
    "EnvSpec": "gem_core.registry",
    "EnvAlias": "gem_core.registry",
    "ToolSpec": "gem_core.registry",
    "WrapperSpec": "gem_core.registry",
    "PluginManifest": "gem_core.registry",
    "PLUGIN_API_VERSION": "gem_core.plugins",
    "Registry": "gem_core.registry",
    "hookimpl": "gem_core.hookspecs",
    "hookspec": "gem_core.hookspecs",
    "get_registry": "gem_core.plugins",
    "make": "gem_core.api",
    "make_tool": "gem_core.api",
    "register": "gem_core.api",
    "spec": "gem_core.api",
    "list_envs": "gem_core.api",
    "errors": "gem_core.errors",
    "make_vec": "gem_core.vector",
    "VectorEnv": "gem_core.vector",
    "SyncVectorEnv": "gem_core.vector",
    "AsyncVectorEnv": "gem_core.vector",
    "AutoresetMode": "gem_core.vector",
    "EpisodeRunner": "gem_core.runner",
    "run_episodes": "gem_core.runner",
    "Turn": "gem_core.rl.types",
    "Episode": "gem_core.rl.types",
    "discounted_returns": "gem_core.rl.returns",
    "rebn": "gem_core.rl.advantages",
    "rebn_from_moments": "gem_core.rl.advantages",
    "rebn_advantages": "gem_core.rl.advantages",
    "estimate_advantages": "gem_core.rl.advantages",
    "episode_to_transitions": "gem_core.rl.layouts",
    "episode_to_sequence": "gem_core.rl.layouts",
}

__all__ = ["__version__", *sorted(_EXPORTS)]

if TYPE_CHECKING:
    from gem_core import errors
    from gem_core.api import list_envs, make, make_tool, register, spec
    from gem_core.core import RESERVED_INFO_KEYS, AsyncEnv, Env, to_async, to_sync
    from gem_core.hookspecs import hookimpl, hookspec
    from gem_core.plugins import PLUGIN_API_VERSION, get_registry
    from gem_core.registry import EnvAlias, EnvSpec, PluginManifest, Registry, ToolSpec, WrapperSpec
    from gem_core.rl.advantages import estimate_advantages, rebn, rebn_advantages, rebn_from_moments
    from gem_core.rl.layouts import episode_to_sequence, episode_to_transitions
    from gem_core.rl.returns import discounted_returns
    from gem_core.rl.types import Episode, Turn
    from gem_core.runner import EpisodeRunner, run_episodes
    from gem_core.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv, make_vec


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gem_core' has no attribute {name!r}")
    value = importlib.import_module(module) if name == "errors" else getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
