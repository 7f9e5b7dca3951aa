"""The hooks through which packages add envs, tools, wrappers and ``gem`` commands to gem.

A plugin is a module (or object) with functions marked ``@gem_core.hookimpl``.
Third-party packages expose it through the ``gem_core`` entry-point group::

    # pyproject.toml of a plugin distribution
    [project.entry-points.gem_core]
    my_envs = "my_envs.plugin"

gem_core's own registrations (the reference env, the built-in wrappers) go
through these same hooks; only their discovery differs (they are imported
directly, so they work with autoload off and from a source checkout).

Rules that hold for every hook:

* Hooks are *declarations*: they return specs and must not build envs, open
  connections or import heavy dependencies. gem imports the plugin module
  lazily (on first registry use), so keep the module itself light too and
  point entry points at the modules that do the heavy imports.
* Hooks are called with keyword arguments only, and an implementation may
  accept any subset of a hook's arguments; adding arguments to a hook later
  is therefore not a breaking change.
* Every hook here collects results from all plugins (none is ``firstresult``).
  gem calls each plugin's implementation separately so that a failure or a
  duplicate id is attributed to the plugin that caused it.
* An implementation may return one spec, a list of specs, or ``None``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from gem_core.registry import CommandSpec, EnvAlias, EnvSpec, PluginManifest, ToolSpec, WrapperSpec

PROJECT = "gem_core"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# ---------------------------------------------------------------------------
# Registration hooks
# ---------------------------------------------------------------------------


@hookspec
def register_envs() -> list[EnvSpec | EnvAlias]:  # type: ignore[empty-body]
    """Declare env ids.

    Returns:
        A list of :class:`~gem_core.registry.EnvSpec` (and :class:`~gem_core.registry.EnvAlias`
        for alternative or deprecated ids). The plugin manager fills in each spec's
        ``distribution`` and ``plugin`` fields. An id already declared by another
        plugin raises :class:`~gem_core.errors.DuplicateIdError` naming both owners
        (or is skipped with a warning when broken plugins are skipped).

    Example::

        @hookimpl
        def register_envs():
            return [EnvSpec(id="mygames:Maze-v0", entry_point="mygames.maze:MazeEnv",
                            tags=("multi-turn",), description="Find the exit.")]
    """


@hookspec
def register_tools() -> list[ToolSpec]:  # type: ignore[empty-body]
    """Declare tools buildable with ``gem_core.make_tool(name)``.

    Returns:
        A list of :class:`~gem_core.registry.ToolSpec`. The entry point must build an
        object implementing :class:`gem_core.tools.Tool`.
    """


@hookspec
def register_wrappers() -> list[WrapperSpec]:  # type: ignore[empty-body]
    """Declare wrappers usable by name in ``make(id, wrappers=[...])`` and ``EnvSpec.wrappers``.

    Returns:
        A list of :class:`~gem_core.registry.WrapperSpec`. The entry point is called as
        ``factory(env, **kwargs)`` and returns the wrapped env.
    """


@hookspec
def register_commands() -> list[CommandSpec]:  # type: ignore[empty-body]
    """Declare ``gem`` subcommands (as pytest's and datasette's plugins add theirs).

    gem_core's CLI names no plugin: a command such as ``gem serve`` exists because an
    installed plugin declares it here. The declaration is light (names and ``"module:function"``
    strings); the command's module is imported only when someone runs it, and the CLI looks
    plugins' commands up only when the word after ``gem`` is not one of gem's own (and for
    ``gem --help``), so gem's own commands start as before (``gem list`` reads its cache).

    A plugin's command never takes the CLI down: a hook that raises, a name taken by gem's
    own commands or by another plugin, an entry point that cannot be imported, or a ``run``
    that raises something outside :mod:`gem_core.errors`, each gives a typed error naming the
    plugin (``gem plugins`` lists them) and every other command keeps working.

    Returns:
        A list of :class:`~gem_core.registry.CommandSpec`.

    Example::

        @hookimpl
        def register_commands():
            return [CommandSpec(name="serve", description="serve an env over HTTP",
                                entry_point="my_pkg.cli:run_serve", arguments="my_pkg.cli:serve_arguments")]

        # my_pkg/cli.py
        def serve_arguments(parser: argparse.ArgumentParser) -> None:
            parser.add_argument("env_id")

        def run_serve(args: argparse.Namespace, streams: gem_core.cli.Streams) -> int:
            streams.out.write(f"serving {args.env_id}")
            return 0
    """


@hookspec
def plugin_manifest() -> PluginManifest:  # type: ignore[empty-body]
    """Declare the plugin API version the plugin targets and the namespaces its distribution owns.

    Optional, but every published plugin should have one: gem checks the API version at
    discovery (a plugin written for another version is refused with a message saying
    what to upgrade), and env ids that another distribution declares in an owned
    namespace are refused whatever the discovery switches.

    Returns:
        One :class:`~gem_core.registry.PluginManifest`.

    Example::

        @hookimpl
        def plugin_manifest():
            return PluginManifest(api_version=1, namespaces=("mygames",))
    """
