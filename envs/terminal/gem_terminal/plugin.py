"""gem-terminal's registrations: every shipped task, one by one and together (imports nothing heavy)."""

from __future__ import annotations

from pathlib import Path

from gem_core.hookspecs import hookimpl
from gem_core.registry import EnvSpec, PluginManifest

_ENV = "gem_terminal.env:TerminalEnv"
_TASKS = Path(__file__).parent / "tasks"


@hookimpl
def plugin_manifest() -> PluginManifest:
    # The ids in this namespace are this package's; another distribution's there are refused.
    return PluginManifest(api_version=1, namespaces=("terminal",))


@hookimpl
def register_envs() -> list[EnvSpec]:
    names = sorted(p.name for p in _TASKS.iterdir() if (p / "task.toml").exists() or (p / "task.yaml").exists())
    tags = ("multi-turn", "tool", "terminal", "offline")
    specs = [
        EnvSpec(
            id="terminal:Tasks-v0",
            entry_point=_ENV,
            description=f"{len(names)} offline shell tasks (files, text, git, python, make), one per episode; "
            "tasks_dir= loads Terminal-Bench v1 or Harbor tasks",
            tags=tags,
        )
    ]
    specs += [
        EnvSpec(
            id=f"terminal:Tasks-v0-{name}",
            entry_point=_ENV,
            kwargs={"task": name},
            description=f"the shell task {name!r} alone",
            tags=tags,
        )
        for name in names
    ]
    return specs
