"""Plugin discovery: builds the process-wide registry from pluggy hooks, lazily.

Nothing here runs at ``import gem_core``. The first call to :func:`get_registry`
(which ``make``, ``gem list`` and friends do) imports the built-in plugins, loads
the ``gem_core`` entry points and the plugins folder, and collects every plugin's
declarations.

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
    Print every hook call (which plugin, what it returned or raised) to stderr.
``GEM_CORE_PLUGINS_DIR=path[:path...]``
    Also load every ``*.py`` file in these folders as a plugin (named after the file),
    for developing a plugin without packaging it.

Namespace ownership: a plugin declares the namespaces its distribution owns in its
``plugin_manifest`` hook. Another distribution's env ids in an owned namespace are
refused (:class:`~gem_core.errors.NamespaceError`) whatever the switches; only a
runtime ``register(..., override=True)`` may add to someone else's namespace.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import os
import sys
import threading
import traceback
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy
from pydantic import BaseModel, ValidationError

from gem_core import hookspecs
from gem_core.errors import (
    GemCoreError,
    NamespaceError,
    PluginLoadError,
    PluginValidationError,
    PluginWarning,
    RegistrationError,
)
from gem_core.registry import (
    EnvAlias,
    EnvSpec,
    PluginManifest,
    Registry,
    ToolSpec,
    WrapperSpec,
    format_config_error,
    iter_specs,
)

__all__ = [
    "BUILTIN_PLUGINS",
    "ENTRY_POINT_GROUP",
    "PLUGIN_API_VERSION",
    "Discovery",
    "PluginInfo",
    "PluginSettings",
    "Problem",
    "build_registry",
    "discover",
    "get_discovery",
    "get_plugin_report",
    "get_registry",
    "reset_registry",
]

ENTRY_POINT_GROUP = "gem_core"
#: The plugin API this gem-core speaks. A plugin declares the version it was written for
#: in its ``plugin_manifest``; a different version is refused at discovery.
PLUGIN_API_VERSION = 1
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
    plugin_dirs: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PluginSettings:
        env = os.environ if environ is None else environ
        return cls(
            autoload=not _flag(env.get("GEM_CORE_DISABLE_PLUGIN_AUTOLOAD")),
            allow=_csv(env.get("GEM_CORE_PLUGINS")),
            block=_csv(env.get("GEM_CORE_BLOCK_PLUGINS")),
            skip_broken=_flag(env.get("GEM_CORE_SKIP_BROKEN_PLUGINS")),
            trace=_flag(env.get("GEM_CORE_TRACE_PLUGINS")),
            plugin_dirs=tuple(p for p in (env.get("GEM_CORE_PLUGINS_DIR") or "").split(os.pathsep) if p),
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
    #: Where the plugin's code lives (entry-point value, or the file of a plugins-folder plugin).
    source: str | None = None
    api_version: int | None = None
    namespaces: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        if self.builtin:
            dist = "gem_core (built-in)"
        elif self.distribution:
            dist = f"{self.distribution} {self.version}"
        else:
            dist = f"the plugins folder ({self.source})"
        return f"plugin {self.name!r} from {dist}"

    @property
    def owner(self) -> str:
        """The key that owns namespaces: the distribution, else the plugin itself."""
        if self.builtin:
            return "gem-core"
        return self.distribution or f"plugin {self.name}"


@dataclass(frozen=True)
class Problem:
    """One thing that went wrong in discovery, and the plugin it is attributed to (if any)."""

    plugin: str | None
    error: GemCoreError


@dataclass
class Discovery:
    """Everything one discovery pass found, including what went wrong.

    Attributes:
        registry: Declarations of every plugin that loaded (a broken plugin's are left out).
        plugins: One :class:`PluginInfo` per plugin seen, built-ins first.
        problems: One per problem, in the order met; each error's message names its plugin.
        settings: The switches discovery ran with.
    """

    registry: Registry
    plugins: list[PluginInfo]
    problems: list[Problem]
    settings: PluginSettings

    @property
    def errors(self) -> list[GemCoreError]:
        """The problems' errors, in order."""
        return [p.error for p in self.problems]

    def info(self, name: str | None) -> PluginInfo | None:
        """The plugin called ``name``, if discovery saw one."""
        return next((p for p in self.plugins if p.name == name), None)

    @property
    def broken(self) -> list[PluginInfo]:
        """Plugins whose status is ``broken``."""
        return [p for p in self.plugins if p.status == "broken"]

    def raise_if_broken(self) -> None:
        """Raise the first error unless broken plugins are skipped."""
        if self.errors and not self.settings.skip_broken:
            raise self.errors[0]


def _make_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def _tracer(pm: pluggy.PluginManager, infos: Mapping[str, PluginInfo]) -> None:
    """Write each hook call, the plugin it went to and its result to stderr."""

    def label(methods: Sequence[pluggy.HookImpl]) -> str:
        return ", ".join(infos[m.plugin_name].label if m.plugin_name in infos else m.plugin_name for m in methods)

    def before(hook_name: str, methods: Sequence[pluggy.HookImpl], kwargs: Mapping[str, object]) -> None:
        sys.stderr.write(f"gem_core trace: calling {hook_name}() of {label(methods)}\n")

    def after(
        outcome: pluggy.Result[object],
        hook_name: str,
        methods: Sequence[pluggy.HookImpl],
        kwargs: Mapping[str, object],
    ) -> None:
        if outcome.exception is not None:
            sys.stderr.write(f"gem_core trace: {hook_name} raised {outcome.exception!r}\n")
            return
        names = [getattr(s, "id", getattr(s, "name", s)) for s in iter_specs(outcome.get_result())]  # type: ignore[arg-type]
        sys.stderr.write(f"gem_core trace: {hook_name} returned {names}\n")

    pm.add_hookcall_monitoring(before, after)


def _hint(info: PluginInfo, exc: BaseException | None) -> str:
    """How to get going again: install what is missing, or leave the plugin out."""
    skip = (
        f"To go on without it, set GEM_CORE_BLOCK_PLUGINS={info.name}"
        " (or GEM_CORE_SKIP_BROKEN_PLUGINS=1 to skip every broken plugin)."
    )
    top = exc.name.split(".")[0] if isinstance(exc, ModuleNotFoundError) and exc.name else None
    # A missing submodule of an installed package is a stale or broken install, not a missing dependency.
    if top is not None and importlib.util.find_spec(top) is None:
        what = f"reinstall {info.distribution} with its dependencies, or " if info.distribution else ""
        return f"It imports {top!r}, which is not installed: {what}pip install {top}. {skip}"
    who = f"Upgrade or reinstall {info.distribution}, or report this to its authors. " if info.distribution else ""
    return who + skip


def _warn_at(message: str, plugin: object, exc: BaseException | None) -> None:
    """Warn with the plugin's file and line, so ``-W`` filters and the report point at the plugin."""
    module_name = getattr(plugin, "__name__", None) if isinstance(plugin, ModuleType) else None
    filename, lineno = "<unknown plugin>", 0
    if isinstance(plugin, str):  # an entry-point value that failed to import: "pkg.mod" or "pkg.mod:attr"
        module_name = plugin.partition(":")[0]
    if exc is not None:  # the deepest frame inside the plugin's own package
        top = (module_name or "").split(".")[0]
        for frame in reversed(traceback.extract_tb(exc.__traceback__)):
            mod_file = Path(frame.filename)
            if top and (top in mod_file.parts or mod_file.stem == top):
                filename, lineno = frame.filename, frame.lineno or 0
                break
    if filename == "<unknown plugin>" and isinstance(plugin, ModuleType):
        filename = getattr(plugin, "__file__", None) or filename
    warnings.warn_explicit(message, PluginWarning, filename, lineno, module=module_name or "gem_core.plugins")


def _load_dir_plugins(directory: str) -> list[tuple[str, Path]]:
    """The ``*.py`` files of a plugins folder, sorted, as ``(module name, path)``."""
    path = Path(directory)
    if not path.is_dir():
        raise PluginLoadError(
            f"GEM_CORE_PLUGINS_DIR: {directory!r} is not a folder. Point it at a folder of plugin *.py files."
        )
    return [(p.stem, p) for p in sorted(path.glob("*.py")) if not p.name.startswith("_")]


def _import_file(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - only for non-.py files
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # so "name:Attr" entry points in its specs resolve
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def discover(
    settings: PluginSettings | None = None,
    *,
    entry_points: Iterable[md.EntryPoint] | None = None,
    extra_plugins: Iterable[tuple[str, Any]] = (),
) -> Discovery:
    """Discover plugins and collect their declarations; never raises for a plugin's fault.

    A plugin that fails to import, whose hook raises, that targets another plugin API,
    or whose declarations conflict with another plugin's is marked ``broken`` and its
    error recorded (with a :class:`~gem_core.errors.PluginWarning` pointing at the
    plugin when ``settings.skip_broken``); the other plugins are unaffected.

    Args:
        settings: Discovery switches; defaults to :meth:`PluginSettings.from_env`.
        entry_points: Entry points to consider instead of the installed ``gem_core`` group
            (for tests).
        extra_plugins: ``(name, plugin)`` pairs registered after entry points.

    Returns:
        The registry, one :class:`PluginInfo` per plugin seen, and the errors.
    """
    settings = settings or PluginSettings.from_env()
    pm = _make_manager()
    infos: dict[str, PluginInfo] = {}
    objects: dict[str, Any] = {}  # plugin name -> the registered module/object
    problems: list[Problem] = []
    if settings.trace:
        _tracer(pm, infos)

    def fail(info: PluginInfo, error: GemCoreError, exc: BaseException | None, where: object) -> None:
        info.status, info.error = "broken", str(error)
        if exc is not None:
            error.__cause__ = exc
        problems.append(Problem(info.name, error))
        if settings.skip_broken:
            _warn_at(f"{error} (skipped because GEM_CORE_SKIP_BROKEN_PLUGINS is set)", where, exc)

    def load_error(info: PluginInfo, what: str, exc: BaseException | None) -> PluginLoadError:
        hint = _hint(info, exc)
        return PluginLoadError(
            f"{what} {hint}", plugin=info.name, distribution=info.distribution, version=info.version, hint=hint
        )

    def add(name: str, plugin: Any, info: PluginInfo) -> None:
        pm.register(plugin, name=name)
        infos[name], objects[name] = info, plugin

    for module_name in BUILTIN_PLUGINS:
        add(module_name, importlib.import_module(module_name), PluginInfo(module_name, None, None, builtin=True))

    if settings.autoload:
        eps = entry_points if entry_points is not None else md.entry_points(group=ENTRY_POINT_GROUP)
        for ep in sorted(eps, key=lambda e: e.name):
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else None
            version = dist.version if dist is not None else None
            info = PluginInfo(ep.name, dist_name, version, builtin=False, source=ep.value)
            if ep.name in infos:
                msg = f"{info.label}: another plugin is already registered under the name {ep.name!r}."
                fail(info, load_error(info, msg, None), None, ep.value)
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
                add(ep.name, ep.load(), info)
            except Exception as exc:
                msg = f"cannot load {info.label} (entry point {ep.value!r}): {type(exc).__name__}: {exc}."
                fail(info, load_error(info, msg, exc), exc, ep.value)

    for directory in settings.plugin_dirs:
        try:
            files = _load_dir_plugins(directory)
        except PluginLoadError as exc:
            problems.append(Problem(None, exc))
            continue
        for name, path in files:
            info = PluginInfo(name, None, None, builtin=False, source=str(path))
            if name in infos:
                msg = f"{info.label}: another plugin is already registered under the name {name!r}."
                fail(info, load_error(info, msg, None), None, name)
                continue
            infos[name] = info
            try:
                add(name, _import_file(name, path), info)
            except Exception as exc:
                fail(info, load_error(info, f"cannot load {info.label}: {type(exc).__name__}: {exc}.", exc), exc, name)

    for name, plugin in extra_plugins:
        add(name, plugin, PluginInfo(name, None, None, builtin=False))

    def call(hook_name: str, name: str) -> list[Any]:
        # Through pluggy's hook caller (so tracing and monitoring see it), one plugin at a time,
        # so that each result and failure is attributed to its owner.
        others = [p for n, p in objects.items() if n != name]
        return list(iter_specs(pm.subset_hook_caller(hook_name, remove_plugins=others)()))

    loaded = [n for n in objects if infos[n].status == "loaded"]
    implementers = {
        hook: {impl.plugin_name for impl in getattr(pm.hook, hook).get_hookimpls()}
        for hook in ("plugin_manifest", *_HOOKS)
    }
    registry = Registry()
    for name in loaded:
        info = infos[name]
        if name not in implementers["plugin_manifest"]:
            continue
        try:
            manifest = _manifest(call("plugin_manifest", name))
        except Exception as exc:
            msg = f"{info.label}: hook plugin_manifest failed: {type(exc).__name__}: {exc}."
            fail(info, load_error(info, msg, exc), exc, objects[name])
            continue
        info.api_version = manifest.api_version
        if manifest.api_version != PLUGIN_API_VERSION:
            from gem_core import __version__

            newer = manifest.api_version > PLUGIN_API_VERSION
            plugin_dist = info.distribution or "the plugin"
            fix = "upgrade gem-core" if newer else f"upgrade {plugin_dist} or install an older gem-core"
            msg = (
                f"{info.label} targets gem plugin API {manifest.api_version}, but gem-core {__version__} "
                f"speaks API {PLUGIN_API_VERSION}: {fix}."
            )
            fail(info, load_error(info, msg, None), None, objects[name])
            continue
        for namespace in manifest.namespaces:
            try:
                registry.claim_namespace(namespace, info.owner)
            except NamespaceError as exc:
                fail(info, exc, None, objects[name])
                break
            info.namespaces.append(namespace)
    for hook_name, allowed in _HOOKS.items():
        for name in loaded:
            info = infos[name]
            if info.status == "broken" or name not in implementers[hook_name]:
                continue
            try:
                specs = [_stamp(s, allowed, info) for s in call(hook_name, name)]
            except Exception as exc:
                msg = f"{info.label}: hook {hook_name} failed: {type(exc).__name__}: {exc}."
                fail(info, load_error(info, msg, exc), exc, objects[name])
                continue
            for spec in specs:
                try:
                    registry.add(spec)
                except RegistrationError as exc:
                    # Namespace refusals and duplicates leave the first owner's declaration in place.
                    what = "Refused." if isinstance(exc, NamespaceError) else "Keeping the first."
                    error = type(exc)(f"{exc} {what} Skipping the one from {info.label}.")
                    fail(info, error, None, objects[name])
                    continue
                key = spec.id if isinstance(spec, (EnvSpec, EnvAlias)) else spec.name
                info.registered.setdefault(hook_name.removeprefix("register_"), []).append(key)
    ordered = sorted(infos.values(), key=lambda i: (not i.builtin, i.name))
    return Discovery(registry, ordered, problems, settings)


def build_registry(
    settings: PluginSettings | None = None,
    *,
    entry_points: Iterable[md.EntryPoint] | None = None,
    extra_plugins: Iterable[tuple[str, Any]] = (),
) -> tuple[Registry, list[PluginInfo]]:
    """Discover plugins and collect their declarations into a fresh registry.

    Same arguments as :func:`discover`.

    Returns:
        The registry and one :class:`PluginInfo` per plugin seen (loaded or not).

    Raises:
        PluginLoadError: a plugin failed to import, its hook raised, or it targets another
            plugin API (unless skipping); the message ends with a hint.
        DuplicateIdError: two plugins declared one id (unless skipping); names both.
        NamespaceError: a plugin declared an id in a namespace another distribution owns.
    """
    found = discover(settings, entry_points=entry_points, extra_plugins=extra_plugins)
    found.raise_if_broken()
    return found.registry, found.plugins


def _manifest(results: list[Any]) -> PluginManifest:
    if len(results) != 1:
        raise PluginValidationError(f"plugin_manifest must return one PluginManifest, got {len(results)} values")
    value = results[0]
    if isinstance(value, dict):
        try:
            value = PluginManifest.model_validate(value)
        except ValidationError as exc:
            raise PluginValidationError(format_config_error("plugin manifest", exc)) from exc
    if not isinstance(value, PluginManifest):
        raise PluginValidationError(f"plugin_manifest returned {type(value).__name__}, expected PluginManifest")
    return value


def _stamp(spec: Any, allowed: tuple[type[BaseModel], ...], info: PluginInfo) -> Any:
    if isinstance(spec, dict):  # plain dicts are accepted and validated like specs
        try:
            spec = allowed[0].model_validate(spec)
        except ValidationError as exc:
            raise PluginValidationError(format_config_error("declaration", exc)) from exc
    if not isinstance(spec, allowed):
        names = " or ".join(t.__name__ for t in allowed)
        raise PluginValidationError(f"returned {type(spec).__name__}, expected {names}")
    return spec.model_copy(update={"distribution": info.owner, "plugin": info.name})


_lock = threading.Lock()
_state: Discovery | None = None


def get_discovery() -> Discovery:
    """The process-wide discovery result, built on first use; never raises for a plugin's fault."""
    global _state
    if _state is None:
        with _lock:
            if _state is None:
                _state = discover()
    return _state


def get_registry() -> Registry:
    """The process-wide registry, built on first use from installed plugins.

    Raises:
        PluginLoadError: a plugin is broken and ``GEM_CORE_SKIP_BROKEN_PLUGINS`` is not set
            (also :class:`~gem_core.errors.DuplicateIdError` or
            :class:`~gem_core.errors.NamespaceError` for conflicting declarations).
    """
    found = get_discovery()
    found.raise_if_broken()
    return found.registry


def get_plugin_report() -> list[PluginInfo]:
    """What each plugin is and registered, broken ones included (builds the registry if needed)."""
    return get_discovery().plugins


def reset_registry() -> None:
    """Forget the process-wide registry; the next use rediscovers plugins."""
    global _state
    with _lock:
        _state = None
