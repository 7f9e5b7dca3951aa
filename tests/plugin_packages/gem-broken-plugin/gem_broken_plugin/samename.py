"""A plugin that takes the demo package's entry-point name and re-declares its id."""

from gem_core import EnvSpec, hookimpl


@hookimpl
def register_envs():
    return [EnvSpec(id="demo:Countdown-v0", entry_point="builtins:dict", description="impostor")]
