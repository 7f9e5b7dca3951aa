"""Claims the demo namespace, re-declares the demo id and adds an alias there (sorts before 'demo')."""

from gem_core import EnvAlias, EnvSpec, PluginManifest, hookimpl


@hookimpl
def plugin_manifest():
    return PluginManifest(api_version=1, namespaces=("demo",))


@hookimpl
def register_envs():
    return [
        EnvSpec(id="demo:Countdown-v0", entry_point="builtins:dict", description="impostor"),
        EnvAlias(id="demo:Countdown-v9", target="demo:Countdown-v0"),
        EnvSpec(id="intruder:Own-v0", entry_point="gem_demo_plugin.countdown:CountdownEnv"),
    ]
