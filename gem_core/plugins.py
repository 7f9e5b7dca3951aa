"""Plugin discovery: builds the process-wide registry from pluggy hooks, lazily.

Nothing here runs at ``import gem_core``. The first call to :func:`get_registry`
(which ``make``, ``gem list`` and friends do) imports the built-in plugins, loads
the ``gem_core`` entry points, and collects every plugin's declarations.

Environment switches (read when the registry is built):

``GEM_CORE_DISABLE_PLUGIN_AUTOLOAD=1``
    Load no entry points; only gem_core's built-ins (and plugins registered by hand).
``GEM_CORE_PLUGINS=name,dist,...``
    Allow-list: load only entry points whose name or distribution is listed.
``GEM_CORE_BLOCK_PLUGINS=name,dist,...``
    Block-list: never load these entry points (by name or distribution).
``GEM_CORE_SKIP_BROKEN_PLUGINS=1``
    A plugin that fails to import, whose hook raises, or that declares a duplicate id
    is skipped with a :class:`~gem_core.errors.PluginWarning` instead of raising.
``GEM_CORE_TRACE_PLUGINS=1``
    Print every hook call with its results to stderr.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import os
import sys
import threading
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pluggy
from pydantic import BaseModel, ValidationError

from gem_core import hookspecs
from gem_core.errors import DuplicateIdError, PluginLoadError, PluginValidationError, PluginWarning
from gem_core.registry import EnvAlias, EnvSpec, Registry, ToolSpec, WrapperSpec, format_config_error, iter_specs

__all__ = [
    "BUILTIN_PLUGINS",
    "ENTRY_POINT_GROUP",
    "PluginInfo",
    "PluginSettings",
    "build_registry",
    "get_plugin_report",
    "get_registry",
    "reset_registry",
]

ENTRY_POINT_GROUP = "gem_core"
#: Modules registered before entry points, through the same hooks. Cannot be blocked.
BUILTIN_PLUGINS: tuple[str, ...] = ("gem_core.builtin",)

_HOOKS: dict[str, tuple[type[BaseModel], ...]] = {
    "register_envs": (EnvSpec, EnvAlias),
    "register_tools": (ToolSpec,),
    "register_wrappers": (WrapperSpec,),
}


def _csv(value: str | None) -> frozenset[str]:
    return frozenset(p.strip() for p in (value or "").split(",") if p.strip())


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class PluginSettings:
    """How discovery behaves; :meth:`from_env` reads the ``GEM_CORE_*`` variables."""

    autoload: bool = True
    allow: frozenset[str] = frozenset()
    block: frozenset[str] = frozenset()
    skip_broken: bool = False
    trace: bool = False

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> PluginSettings:
        env = os.environ if environ is None else environ
        return cls(
            autoload=not _flag(env.get("GEM_CORE_DISABLE_PLUGIN_AUTOLOAD")),
            allow=_csv(env.get("GEM_CORE_PLUGINS")),
            block=_csv(env.get("GEM_CORE_BLOCK_PLUGINS")),
            skip_broken=_flag(env.get("GEM_CORE_SKIP_BROKEN_PLUGINS")),
            trace=_flag(env.get("GEM_CORE_TRACE_PLUGINS")),
        )


@dataclass
class PluginInfo:
    """What ``gem plugins`` reports about one plugin."""

    name: str
    distribution: str | None
    version: str | None
    builtin: bool
    registered: dict[str, list[str]] = field(default_factory=dict)
    status: str = "loaded"  # loaded | blocked | not allowed | broken
    error: str | None = None

    @property
    def label(self) -> str:
        dist = f"{self.distribution} {self.version}" if self.distribution else "gem_core (built-in)"
        return f"plugin {self.name!r} from {dist}"


def _make_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def build_registry(
    settings: PluginSettings | None = None,
    *,
    entry_points: Iterable[md.EntryPoint] | None = None,
    extra_plugins: Iterable[tuple[str, Any]] = (),
) -> tuple[Registry, list[PluginInfo]]:
    """Discover plugins and collect their declarations into a fresh registry.

    Args:
        settings: Discovery switches; defaults to :meth:`PluginSettings.from_env`.
        entry_points: Entry points to consider instead of the installed ``gem_core`` group
            (for tests).
        extra_plugins: ``(name, plugin)`` pairs registered after entry points.

    Returns:
        The registry and one :class:`PluginInfo` per plugin seen (loaded or not).

    Raises:
        PluginLoadError: a plugin failed to import or its hook raised (unless skipping).
        DuplicateIdError: two plugins declared one id (unless skipping); names both.
    """
    settings = settings or PluginSettings.from_env()
    pm = _make_manager()
    if settings.trace:
        pm.trace.root.setwriter(lambda msg: sys.stderr.write(str(msg)))
        pm.enable_tracing()
    infos: dict[str, PluginInfo] = {}

    def fail(info: PluginInfo, message: str, exc: BaseException | None) -> None:
        info.status, info.error = "broken", message
        if not settings.skip_broken:
            raise PluginLoadError(message) from exc
        warnings.warn(f"{message} (skipped because GEM_CORE_SKIP_BROKEN_PLUGINS is set)", PluginWarning, stacklevel=3)

    for module_name in BUILTIN_PLUGINS:
        pm.register(importlib.import_module(module_name), name=module_name)
        infos[module_name] = PluginInfo(module_name, None, None, builtin=True)

    if settings.autoload:
        eps = entry_points if entry_points is not None else md.entry_points(group=ENTRY_POINT_GROUP)
        for ep in sorted(eps, key=lambda e: e.name):
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else None
            version = dist.version if dist is not None else None
            info = PluginInfo(ep.name, dist_name, version, builtin=False)
            if ep.name in infos:
                fail(info, f"{info.label}: another plugin is already registered under the name {ep.name!r}", None)
                continue
            infos[ep.name] = info
            keys = {ep.name, dist_name or ""}
            if settings.block & keys:
                info.status = "blocked"
                continue
            if settings.allow and not settings.allow & keys:
                info.status = "not allowed"
                continue
            try:
                plugin = ep.load()
                pm.register(plugin, name=ep.name)
            except Exception as exc:
                fail(info, f"cannot load {info.label} (entry point {ep.value!r}): {type(exc).__name__}: {exc}", exc)

    for name, plugin in extra_plugins:
        pm.register(plugin, name=name)
        infos[name] = PluginInfo(name, None, None, builtin=False)

    registry = Registry()
    for hook_name, allowed in _HOOKS.items():
        hook = getattr(pm.hook, hook_name)
        # One call per implementation, oldest plugin first, so each result is attributed to its owner.
        for impl in hook.get_hookimpls():
            info = infos[impl.plugin_name]
            if info.status == "broken":
                continue
            try:
                specs = list(iter_specs([impl.function()]))
                specs = [_stamp(s, allowed, info) for s in specs]
            except Exception as exc:
                fail(info, f"{info.label}: hook {hook_name} failed: {type(exc).__name__}: {exc}", exc)
                continue
            for spec in specs:
                try:
                    registry.add(spec)
                except DuplicateIdError as exc:
                    if not settings.skip_broken:
                        raise
                    warnings.warn(
                        f"{exc} Keeping the first; skipping the one from {info.label}.", PluginWarning, stacklevel=2
                    )
                    continue
                key = spec.id if isinstance(spec, (EnvSpec, EnvAlias)) else spec.name
                info.registered.setdefault(hook_name.removeprefix("register_"), []).append(key)
    return registry, sorted(infos.values(), key=lambda i: (not i.builtin, i.name))


def _stamp(spec: Any, allowed: tuple[type[BaseModel], ...], info: PluginInfo) -> Any:
    if isinstance(spec, dict):  # plain dicts are accepted and validated like specs
        try:
            spec = allowed[0].model_validate(spec)
        except ValidationError as exc:
            raise PluginValidationError(format_config_error("declaration", exc)) from exc
    if not isinstance(spec, allowed):
        names = " or ".join(t.__name__ for t in allowed)
        raise PluginValidationError(f"returned {type(spec).__name__}, expected {names}")
    return spec.model_copy(update={"distribution": info.distribution or "gem-core", "plugin": info.name})


_lock = threading.Lock()
_state: tuple[Registry, list[PluginInfo]] | None = None


def get_registry() -> Registry:
    """The process-wide registry, built on first use from installed plugins."""
    global _state
    if _state is None:
        with _lock:
            if _state is None:
                _state = build_registry()
    return _state[0]


def get_plugin_report() -> list[PluginInfo]:
    """What each plugin is and registered (builds the registry if needed)."""
    get_registry()
    assert _state is not None
    return _state[1]


def reset_registry() -> None:
    """Forget the process-wide registry; the next use rediscovers plugins."""
    global _state
    with _lock:
        _state = None
