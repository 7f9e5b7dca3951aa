"""Written for a plugin API gem-core does not speak yet."""

from gem_core import EnvSpec, PluginManifest, hookimpl


@hookimpl
def plugin_manifest():
    return PluginManifest(api_version=2, namespaces=("future",))


@hookimpl
def register_envs():
    return [EnvSpec(id="future:X-v0", entry_point="gem_demo_plugin.countdown:CountdownEnv")]
