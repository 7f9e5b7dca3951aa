"""A manifest that is not a PluginManifest."""

from gem_core import hookimpl


@hookimpl
def plugin_manifest():
    return "api 1 please"
