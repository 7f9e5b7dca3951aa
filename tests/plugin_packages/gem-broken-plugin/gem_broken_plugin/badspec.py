"""A declaration with a misspelled field."""

from gem_core import hookimpl


@hookimpl
def register_envs():
    return [{"id": "badspec:X-v0", "entry_pont": "gem_broken_plugin.badspec:X"}]
