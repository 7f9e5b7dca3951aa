"""gem-openenv's plugin: the ``openenv`` namespace (OpenEnv servers as gem envs).

``openenv:Remote-v0`` plays any server given ``base_url=``. Servers named in the
``GEM_OPENENV_SERVERS`` environment variable (``name=url`` pairs, comma-separated) get their
own ids, ``openenv:<name>``, so ``gem list`` shows each with the URL it comes from and
``gem check openenv:<name>`` works without kwargs. The plugin also adds the ``gem serve`` and
``gem export`` commands (gem's ``register_commands`` hook). Nothing here imports OpenEnv.
"""

from __future__ import annotations

import os

from gem_core.errors import ConfigError
from gem_core.hookspecs import hookimpl
from gem_core.registry import ENV_ID_RE, CommandSpec, EnvSpec, PluginManifest

#: The environment variable naming remote servers: ``name=url[,name=url...]``.
SERVERS_VARIABLE = "GEM_OPENENV_SERVERS"
_ENTRY_POINT = "gem_openenv.client:OpenEnvEnv"
_TAGS = ("multi-turn", "remote", "openenv")


def named_servers(value: str | None = None) -> dict[str, str]:
    """The ``name -> url`` pairs of :data:`SERVERS_VARIABLE` (or of ``value``).

    Raises:
        ConfigError: a pair is not ``name=url`` or the name does not make an id.
    """
    text = os.environ.get(SERVERS_VARIABLE, "") if value is None else value
    servers: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, url = item.partition("=")
        name, url = name.strip(), url.strip()
        if not sep or not url or ENV_ID_RE.match(f"openenv:{name}") is None:
            raise ConfigError(
                f"{SERVERS_VARIABLE}: {item!r} is not 'name=url' with a name that makes an id "
                "(letters, digits, '_', '.', e.g. 'wordle=http://127.0.0.1:8000')"
            )
        servers[name] = url
    return servers


@hookimpl
def plugin_manifest() -> PluginManifest:
    return PluginManifest(api_version=1, namespaces=("openenv",))


@hookimpl
def register_commands() -> list[CommandSpec]:
    return [
        CommandSpec(
            name="serve",
            description="serve an env as an OpenEnv env server (WebSocket sessions, HTTP, MCP tools)",
            entry_point="gem_openenv.cli:run_serve",
            arguments="gem_openenv.cli:serve_arguments",
        ),
        CommandSpec(
            name="export",
            description="write an env as another ecosystem's package (openenv: manifest, server, Dockerfile, client)",
            entry_point="gem_openenv.cli:run_export",
            arguments="gem_openenv.cli:export_arguments",
        ),
    ]


@hookimpl
def register_envs() -> list[EnvSpec]:
    specs = [
        EnvSpec(
            id="openenv:Remote-v0",
            entry_point=_ENTRY_POINT,
            description="Any OpenEnv server as a gem env: make('openenv:Remote-v0', base_url='http://host:port').",
            tags=_TAGS,
        )
    ]
    for name, url in named_servers().items():
        specs.append(
            EnvSpec(
                id=f"openenv:{name}",
                entry_point=_ENTRY_POINT,
                kwargs={"base_url": url},
                description=f"remote: the OpenEnv server at {url} (from {SERVERS_VARIABLE})",
                tags=_TAGS,
            )
        )
    return specs
