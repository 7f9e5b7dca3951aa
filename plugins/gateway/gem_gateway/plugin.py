"""gem-gateway's plugin: the ``gem gateway`` command (gem's ``register_commands`` hook); nothing heavy imported."""

from __future__ import annotations

from gem_core.hookspecs import hookimpl
from gem_core.registry import CommandSpec, PluginManifest


@hookimpl
def plugin_manifest() -> PluginManifest:
    return PluginManifest(api_version=1, namespaces=())


@hookimpl
def register_commands() -> list[CommandSpec]:
    return [
        CommandSpec(
            name="gateway",
            description="serve a model as an OpenAI-compatible chat API that records token-exact episodes per session",
            entry_point="gem_gateway.cli:run_gateway",
            arguments="gem_gateway.cli:gateway_arguments",
        )
    ]
