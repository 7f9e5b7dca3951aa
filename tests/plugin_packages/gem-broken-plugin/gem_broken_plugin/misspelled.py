"""A hook name with a typo: pluggy would accept it and gem would never call it."""

from gem_core import EnvSpec, hookimpl


@hookimpl
def register_env():
    return [EnvSpec(id="misspelled:X-v0", entry_point="gem_demo_plugin.countdown:CountdownEnv")]
