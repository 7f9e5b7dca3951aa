"""Declarations only: importing this module must stay cheap (no env code imported)."""

from gem_core import hookimpl
from gem_core.registry import EnvAlias, EnvSpec, PluginManifest


@hookimpl
def plugin_manifest():
    return PluginManifest(api_version=1, namespaces=("demo",))


@hookimpl
def register_envs():
    return [
        EnvSpec(
            id="demo:Countdown-v0",
            entry_point="gem_demo_plugin.countdown:CountdownEnv",
            description="Say the numbers from N down to 1.",
            tags=("multi-turn", "demo"),
        ),
        EnvAlias(id="demo:Countdown-v0-old", target="demo:Countdown-v0", deprecated=True),
    ]
