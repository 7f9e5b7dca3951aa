"""gem-games' plugin: declares every ``game:*`` id through the ``register_envs`` hook.

The declarations live in light ``specs_*`` modules (one per group of games, so the groups can grow
independently); each exposes ``SPECS``, a list of :class:`~gem_core.registry.EnvSpec` and
:class:`~gem_core.registry.EnvAlias`. Neither this module nor the spec modules import a game: entry
points are strings, resolved only when ``gem_core.make`` builds an env.
"""

from __future__ import annotations

import importlib

from gem_core.hookspecs import hookimpl
from gem_core.registry import EnvAlias, EnvSpec, PluginManifest

#: The spec modules, each with a module-level ``SPECS`` list. Add a group by adding one line.
SPEC_MODULES: tuple[str, ...] = ("gem_games.specs_a", "gem_games.specs_b")


@hookimpl
def plugin_manifest() -> PluginManifest:
    # The ids in these namespaces are this package's; another distribution's there are refused.
    return PluginManifest(api_version=1, namespaces=("game",))


@hookimpl
def register_envs() -> list[EnvSpec | EnvAlias]:
    specs: list[EnvSpec | EnvAlias] = []
    for module_name in SPEC_MODULES:
        specs.extend(importlib.import_module(module_name).SPECS)
    return specs
