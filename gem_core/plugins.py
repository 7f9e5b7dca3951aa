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
``GEM_CORE_STRICT_PLUGINS=1``
    Any plugin problem fails every registry use (``make``, ``gem list``...) with the
    problem's error: for CI that must not ship a broken environment. By default a broken
    plugin is reported once (a :class:`~gem_core.errors.PluginWarning` naming the
    distribution, the entry point, what failed and the fix) and left out; everything
    else keeps working. (``GEM_CORE_SKIP_BROKEN_PLUGINS``, the old opt-in, is that default.)
``GEM_CORE_TRACE_PLUGINS=1``
    Print every hook call (which plugin, what it returned or raised) to stderr.
``GEM_CORE_PLUGINS_DIR=path[:path...]``
    Also load every ``*.py`` file in these folders as a plugin (named after the file),
    for developing a plugin without packaging it.

Namespace ownership: a plugin declares the namespaces its distribution owns in its
``plugin_manifest`` hook. Another distribution's env ids and aliases in an owned
namespace are refused *for that distribution* (:class:`~gem_core.errors.NamespaceError`,
naming both); the owner's ids are never affected. When two distributions claim one
namespace, the one named for it (``NS``, ``gem-NS``, or gem's own package for it, see
:data:`GEM_NAMESPACES`) owns it and the other claim is refused; when neither or both
are, nobody owns it until one drops its claim. Only a runtime
``register(..., override=True)`` may add to someone else's namespace.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata as md
import importlib.util
import re
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
    DuplicateIdError,
    GemCoreError,
    NamespaceError,
    PluginLoadError,
    PluginValidationError,
    PluginWarning,
    RegistrationError,
)
from gem_core.plugin_settings import PluginSettings
from gem_core.registry import (
    CommandSpec,
    EnvAlias,
    EnvSpec,
    PluginManifest,
    Registry,
    ToolSpec,
    WrapperSpec,
    format_config_error,
    iter_specs,
    own_name_fix,
)

__all__ = [
    "BUILTIN_PLUGINS",
    "ENTRY_POINT_GROUP",
    "GEM_NAMESPACES",
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
    "named_for",
    "reset_registry",
]

ENTRY_POINT_GROUP = "gem_core"
#: The plugin API this gem-core speaks. A plugin declares the version it was written for
#: in its ``plugin_manifest``; a different version is refused at discovery.
PLUGIN_API_VERSION = 1
#: Modules registered before entry points, through the same hooks. Cannot be blocked.
BUILTIN_PLUGINS: tuple[str, ...] = ("gem_core.builtin",)

#: Namespaces of gem's own distributions: in a dispute over one of these, this distribution owns it.
GEM_NAMESPACES: dict[str, str] = {
    "core": "gem-core",
    "game": "gem-games",
    "code": "gem-code",
    "math": "gem-math",
    "qa": "gem-qa",
    "logic": "gem-qa",
    "rg": "gem-reasoning-gym",
}

_HOOKS: dict[str, tuple[type[BaseModel], ...]] = {
    "register_envs": (EnvSpec, EnvAlias),
    "register_tools": (ToolSpec,),
    "register_wrappers": (WrapperSpec,),
    "register_commands": (CommandSpec,),
}


@dataclass
class PluginInfo:
    """What ``gem plugins`` reports about one plugin."""

    name: str
    distribution: str | None
    version: str | None
    builtin: bool
    registered: dict[str, list[str]] = field(default_factory=dict)
    #: loaded | blocked | not allowed | broken (left out) | partly loaded (some declarations refused)
    status: str = "loaded"
    #: The first problem's message (all of them are in :attr:`Discovery.problems`).
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
    """One thing that went wrong in discovery, and the plugin it is attributed to (if any).

    Attributes:
        plugin: The plugin at fault (``None``: a setting, e.g. a plugins folder that is no folder).
        error: The typed error; its message names the distribution, what failed and the fix.
        where: What the warning points at: the plugin module, an entry-point value, or a
            ``(file, line)`` pair.
    """

    plugin: str | None
    error: GemCoreError
    where: object = None


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
        """Plugins with a problem: ``broken`` (left out) or ``partly loaded``."""
        return [p for p in self.plugins if p.status in {"broken", "partly loaded"}]

    def problems_of(self, plugin_names: Iterable[str | None]) -> list[Problem]:
        """The problems attributed to these plugins."""
        names = set(plugin_names)
        return [p for p in self.problems if p.plugin in names]

    def raise_if_broken(self) -> None:
        """In strict mode (``GEM_CORE_STRICT_PLUGINS``), raise the first problem's error."""
        if self.errors and self.settings.strict:
            raise self.errors[0]

    def warn(self) -> None:
        """Report each problem once as a :class:`~gem_core.errors.PluginWarning` pointing at the plugin."""
        for problem in self.problems:
            _warn_at(str(problem.error), problem.where, problem.error.__cause__)


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
    skip = f"gem leaves it out; to silence this, set GEM_CORE_BLOCK_PLUGINS={info.name}."
    top = exc.name.split(".")[0] if isinstance(exc, ModuleNotFoundError) and exc.name else None
    # A missing submodule of an installed package is a stale or broken install, not a missing dependency.
    own = (info.source or "").partition(":")[0]
    if top is not None and isinstance(exc, ModuleNotFoundError) and exc.name in {own, top} and own.startswith(top):
        where = f"{info.distribution}'s" if info.distribution else "the plugin's"
        return (
            f"The entry point names module {own!r}, which does not exist: a typo in {where} "
            f"[project.entry-points.gem_core], or a broken install (reinstall it). {skip}"
        )
    if top is not None and importlib.util.find_spec(top) is None:
        what = f"reinstall {info.distribution} with its dependencies, or " if info.distribution else ""
        return f"It imports {top!r}, which is not installed: {what}pip install {top}. {skip}"
    who = f"Upgrade or reinstall {info.distribution}, or report this to its authors. " if info.distribution else ""
    return who + skip


def _warn_at(message: str, plugin: object, exc: BaseException | None) -> None:
    """Warn with the plugin's file and line, so ``-W`` filters and the report point at the plugin."""
    module_name = getattr(plugin, "__name__", None) if isinstance(plugin, ModuleType) else None
    filename, lineno = "<unknown plugin>", 0
    if isinstance(plugin, tuple):  # (file, line) of the entry point's declaration
        filename, lineno = plugin
    elif isinstance(plugin, str):  # an entry-point value that failed to import: "pkg.mod" or "pkg.mod:attr"
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


def _dist_name(ep: md.EntryPoint) -> str | None:
    dist = getattr(ep, "dist", None)
    return dist.metadata["Name"] if dist is not None else None


def _entry_point_location(ep: md.EntryPoint) -> tuple[str, int] | None:
    """``(file, line)`` of the entry point's declaration in its installed metadata, if found."""
    base = getattr(getattr(ep, "dist", None), "_path", None)  # PathDistribution: the .dist-info folder
    if base is None:
        return None
    path = Path(str(base)) / "entry_points.txt"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for number, line in enumerate(lines, start=1):
        if line.partition("=")[0].strip() == ep.name:
            return str(path), number
    return None


def _where(ep: md.EntryPoint, exc: BaseException) -> object:
    """What a load failure's warning points at: the plugin's own frame, else its entry-point declaration."""
    top = ep.value.partition(":")[0].split(".")[0]
    frames = traceback.extract_tb(exc.__traceback__)
    own = any(top in Path(f.filename).parts or Path(f.filename).stem == top for f in frames)
    return ep.value if own else (_entry_point_location(ep) or ep.value)


def named_for(distribution: str | None, namespace: str) -> bool:
    """Whether a distribution's name says it is the namespace's home.

    gem's own package for it (:data:`GEM_NAMESPACES`), or a name with the namespace as a
    word: ``ladder``, ``gem-ladder``, ``gem-ladder-envs`` for namespace ``ladder``.
    """
    if distribution is None:
        return False
    words = re.sub(r"[-_.]+", "-", distribution).lower().split("-")
    ns = namespace.lower().split("_")
    if namespace in GEM_NAMESPACES:
        return GEM_NAMESPACES[namespace] == "-".join(words)
    return any(words[i : i + len(ns)] == ns for i in range(len(words)))


def _misspelled_hooks(pm: pluggy.PluginManager, name: str, plugin: object) -> list[str]:
    """Hooks a plugin implements that gem does not define, and hook-named functions not marked as hooks.

    pluggy accepts an implementation of an unknown hook until ``check_pending``; gem would then
    never call it and the plugin would register nothing, silently.
    """
    known = sorted(("plugin_manifest", *_HOOKS))
    found = []
    for hook_name, caller in vars(pm.hook).items():
        if not isinstance(caller, pluggy.HookCaller) or caller.has_spec():
            continue
        for impl in caller.get_hookimpls():
            if impl.plugin_name == name and not impl.optionalhook:
                close = difflib.get_close_matches(hook_name, known, n=1)
                fix = f"rename it to {close[0]!r}" if close else "use one of gem's hooks"
                found.append(
                    f"it implements hook {hook_name!r}, which gem does not define, so it is never called."
                    f" Fix: {fix} (gem's hooks are {', '.join(known)})"
                )
    for hook_name in known:
        fn = getattr(plugin, hook_name, None)
        implemented = {impl.plugin_name for impl in getattr(pm.hook, hook_name).get_hookimpls()}
        if isinstance(plugin, ModuleType) and callable(fn) and name not in implemented:
            found.append(f"it defines {hook_name}() without @hookimpl, so gem ignores it. Fix: mark it @hookimpl")
    return found


def discover(
    settings: PluginSettings | None = None,
    *,
    entry_points: Iterable[md.EntryPoint] | None = None,
    extra_plugins: Iterable[tuple[str, Any]] = (),
) -> Discovery:
    """Discover plugins and collect their declarations; never raises for a plugin's fault.

    A plugin that fails to import, whose hook raises, or that targets another plugin API
    is marked ``broken`` and left out; a declaration refused because it conflicts with
    another plugin's (duplicate id, someone else's namespace) or a misspelled hook marks
    the plugin ``partly loaded`` and drops only that declaration. Each problem is recorded
    once, attributed to the plugin at fault; every other plugin is unaffected. Nothing is
    warned here (see :meth:`Discovery.warn`).

    Args:
        settings: Discovery switches; defaults to :meth:`PluginSettings.from_env`.
        entry_points: Entry points to consider instead of the installed ``gem_core`` group
            (for tests).
        extra_plugins: ``(name, plugin)`` pairs registered after entry points.

    Returns:
        The registry, one :class:`PluginInfo` per plugin seen, and the problems.
    """
    settings = settings or PluginSettings.from_env()
    pm = _make_manager()
    infos: dict[str, PluginInfo] = {}
    objects: dict[str, Any] = {}  # plugin name -> the registered module/object
    problems: list[Problem] = []
    if settings.trace:
        _tracer(pm, infos)

    def fail(info: PluginInfo, error: GemCoreError, exc: BaseException | None, where: object, *, drop: bool) -> None:
        """Record a problem; ``drop``: the whole plugin is left out, else only one declaration."""
        if drop:
            info.status = "broken"
        elif info.status == "loaded":
            info.status = "partly loaded"
        info.error = info.error or str(error)
        if exc is not None:
            error.__cause__ = exc
        problems.append(Problem(info.name, error, where))

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
        # Name order (it decides duplicates); of two plugins with one name, the distributions in name order.
        for ep in sorted(eps, key=lambda e: (e.name, _dist_name(e) or "")):
            dist = getattr(ep, "dist", None)
            dist_name = _dist_name(ep)
            version = dist.version if dist is not None else None
            info = PluginInfo(ep.name, dist_name, version, builtin=False, source=ep.value)
            if ep.name in infos:  # another distribution's plugin of the same name: both load, told apart
                info.name = f"{ep.name} ({dist_name})"
            infos[info.name] = info
            keys = {ep.name, dist_name or ""}
            if settings.block & keys:
                info.status = "blocked"
                continue
            if settings.allow and not settings.allow & keys:
                info.status = "not allowed"
                continue
            try:
                add(info.name, ep.load(), info)
            except Exception as exc:
                msg = f"cannot load {info.label} (entry point {ep.name} = {ep.value!r}): {type(exc).__name__}: {exc}."
                fail(info, load_error(info, msg, exc), exc, _where(ep, exc), drop=True)

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
                fail(info, load_error(info, msg, None), None, (str(path), 1), drop=True)
                continue
            infos[name] = info
            try:
                add(name, _import_file(name, path), info)
            except Exception as exc:
                msg = f"cannot load {info.label}: {type(exc).__name__}: {exc}."
                fail(info, load_error(info, msg, exc), exc, name, drop=True)

    for name, plugin in extra_plugins:
        add(name, plugin, PluginInfo(name, None, None, builtin=False))

    for name, plugin in objects.items():
        for what in _misspelled_hooks(pm, name, plugin):
            info = infos[name]
            fail(info, PluginValidationError(f"{info.label}: {what}."), None, plugin, drop=False)

    def call(hook_name: str, name: str) -> list[Any]:
        # Through pluggy's hook caller (so tracing and monitoring see it), one plugin at a time,
        # so that each result and failure is attributed to its owner.
        others = [p for n, p in objects.items() if n != name]
        return list(iter_specs(pm.subset_hook_caller(hook_name, remove_plugins=others)()))

    loaded = [n for n in objects if infos[n].status != "broken"]
    implementers = {
        hook: {impl.plugin_name for impl in getattr(pm.hook, hook).get_hookimpls()}
        for hook in ("plugin_manifest", *_HOOKS)
    }
    registry = Registry()
    claims: dict[str, list[PluginInfo]] = {}
    for name in loaded:
        info = infos[name]
        if name not in implementers["plugin_manifest"]:
            continue
        try:
            manifest = _manifest(call("plugin_manifest", name))
        except Exception as exc:
            msg = f"{info.label}: hook plugin_manifest failed: {type(exc).__name__}: {exc}."
            fail(info, load_error(info, msg, exc), exc, objects[name], drop=True)
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
            fail(info, load_error(info, msg, None), None, objects[name], drop=True)
            continue
        for namespace in manifest.namespaces:
            claims.setdefault(namespace, []).append(info)
    for namespace, claimants in claims.items():
        for claimant, refusal in _settle_claims(registry, namespace, claimants):
            fail(claimant, refusal, None, objects[claimant.name], drop=False)
    for hook_name, allowed in _HOOKS.items():
        for name in loaded:
            info = infos[name]
            if info.status == "broken" or name not in implementers[hook_name]:
                continue
            try:
                specs = [_stamp(s, allowed, info) for s in call(hook_name, name)]
            except Exception as exc:
                msg = f"{info.label}: hook {hook_name} failed: {type(exc).__name__}: {exc}."
                fail(info, load_error(info, msg, exc), exc, objects[name], drop=True)
                _withdraw(registry, info)
                continue
            for spec in specs:
                try:
                    registry.add(spec)
                except DuplicateIdError as exc:
                    first = registry.envs.get(spec.id) if isinstance(spec, EnvSpec) else None
                    if first is None or not _home_beats(spec, first) or first.plugin not in infos:
                        fail(info, _refusal(registry, spec, info, exc), None, objects[name], drop=False)
                        continue
                    # The package named for an unowned namespace keeps its id, whatever the plugin order.
                    loser = infos[first.plugin]
                    fail(loser, _refusal(registry, first, loser, exc, kept=spec), None, objects[loser.name], drop=False)
                    loser.registered["envs"].remove(spec.id)
                    if not loser.registered["envs"]:
                        del loser.registered["envs"]
                    registry.add(spec, override=True)
                except RegistrationError as exc:
                    fail(info, _refusal(registry, spec, info, exc), None, objects[name], drop=False)
                    continue
                key = spec.id if isinstance(spec, (EnvSpec, EnvAlias)) else spec.name
                info.registered.setdefault(hook_name.removeprefix("register_"), []).append(key)
    ordered = sorted(infos.values(), key=lambda i: (not i.builtin, i.name))
    registry.unavailable = [i.label for i in ordered if i.status == "broken"]
    return Discovery(registry, ordered, problems, settings)


def _settle_claims(
    registry: Registry, namespace: str, claimants: list[PluginInfo]
) -> list[tuple[PluginInfo, NamespaceError]]:
    """Give ``namespace`` its owner; the refused claims, each with the error for its plugin."""
    owners = sorted({i.owner for i in claimants})
    if len(owners) == 1:
        registry.claim_namespace(namespace, owners[0])
        for info in claimants:
            info.namespaces.append(namespace)
        return []
    rightful = [o for o in owners if o == "gem-core" or named_for(o, namespace)]
    refused = []
    if len(rightful) == 1:
        registry.claim_namespace(namespace, rightful[0])
        for info in claimants:
            if info.owner == rightful[0]:
                info.namespaces.append(namespace)
                continue
            msg = (
                f"{info.label} claims namespace {namespace!r}, which belongs to {rightful[0]} (the package named for"
                f" it); the claim is refused and {rightful[0]}'s ids are unaffected. Fix for the authors of"
                f" {info.owner}: claim a namespace of your own in plugin_manifest."
                f" {_user_fix(info, _blockable(rightful[0]))}"
            )
            refused.append((info, NamespaceError(msg)))
        return refused
    for info in claimants:
        rivals = ", ".join(o for o in owners if o != info.owner)
        msg = (
            f"{info.label} claims namespace {namespace!r}, and so does {rivals}; gem cannot tell whose home it is,"
            " so nobody owns it until one claim is dropped (ids there register first come, first served). Fix for"
            f" the authors: the package that is not {namespace!r}'s home drops it from plugin_manifest (a namespace"
            f" of its own). Fix for users: to keep only one of them, GEM_CORE_BLOCK_PLUGINS=<the other plugin>"
            f" (here {info.name!r} or {rivals})."
        )
        refused.append((info, NamespaceError(msg)))
    return refused


def _home_beats(spec: EnvSpec, first: EnvSpec) -> bool:
    """Whether ``spec`` comes from the namespace's home and ``first`` does not (an unowned namespace)."""
    return named_for(spec.distribution, spec.namespace) and not named_for(first.distribution, spec.namespace)


def _refusal(
    registry: Registry, spec: Any, info: PluginInfo, exc: RegistrationError, *, kept: Any = None
) -> RegistrationError:
    """The error for one declaration the registry refused, worded for the plugin at fault.

    ``kept``: the declaration kept instead of ``spec`` when it is not the one registered first.
    """
    if isinstance(exc, NamespaceError):
        namespace = spec.id.split(":", 1)[0]
        owner = registry.namespace_owners.get(namespace)
        kind = "alias" if isinstance(spec, EnvAlias) else "env id"
        return NamespaceError(
            f"{info.label} declares {kind} {spec.id!r} in namespace {namespace!r}, which {owner} owns; it is refused"
            f" and {owner}'s ids are unaffected. Fix for the authors of {info.owner}: use a namespace of your own"
            f" (claimed in plugin_manifest). {_user_fix(info, _blockable(owner))}"
        )
    if kept is not None:
        return DuplicateIdError(
            f"env id {spec.id!r} is declared by {kept.owner} and by {info.label}; gem keeps {kept.plugin!r}'s, as"
            f" {kept.distribution} is named for namespace {spec.namespace!r}. Fix for the authors of {info.owner}:"
            f" use an id in a namespace of your own (claimed in plugin_manifest). {_user_fix(info, kept.plugin)}"
        )
    if isinstance(spec, (EnvSpec, EnvAlias)):
        key = spec.id
        first: Any = registry.envs.get(key) or registry.aliases.get(key)
        kind = "env id"
    else:
        key = spec.name
        table = _table_of(registry, spec)
        first, kind = table.get(key), table.kind
    if first is None:  # pragma: no cover - every refusal but a namespace one names a first declaration
        return type(exc)(f"{info.label}: {exc}")
    by = f"{first.plugin} ({first.distribution})" if first.distribution else "a runtime register()"
    builtin = first.plugin in BUILTIN_PLUGINS or first.distribution == "gem-core"
    return DuplicateIdError(
        f"{kind} {key!r} is declared by {by} and again by {info.label}; gem keeps {first.plugin!r}'s (plugins are"
        f" read in name order) and leaves out the other. Fix for the authors of {info.owner}: {own_name_fix(kind)}."
        f" {_user_fix(info, None if builtin else first.plugin)}"
    )


def _table_of(registry: Registry, spec: Any) -> Any:
    """The registry table a tool, wrapper or command declaration goes to."""
    if isinstance(spec, ToolSpec):
        return registry.tools
    return registry.commands if isinstance(spec, CommandSpec) else registry.wrappers


def _blockable(owner: str | None) -> str | None:
    """What ``GEM_CORE_BLOCK_PLUGINS`` takes to leave out a namespace owner; ``None`` for gem-core (never blocked)."""
    if owner is None or owner == "gem-core":
        return None
    return owner.removeprefix("plugin ")  # PluginInfo.owner of a plugin without a distribution


def _user_fix(refused: PluginInfo, kept: str | None) -> str:
    """What a user can do about a refused declaration now, without waiting for its authors.

    Args:
        refused: The plugin whose declaration was refused.
        kept: The plugin (or distribution) whose declaration won, if the user may block it
            (gem-core's built-ins cannot be blocked).
    """
    instead = f"to use {refused.name!r}'s instead, set GEM_CORE_BLOCK_PLUGINS={kept}; " if kept else ""
    leave = f"to leave {refused.name!r} out and silence this, GEM_CORE_BLOCK_PLUGINS={refused.name}."
    return f"Fix for users: {instead}{leave}"


def _withdraw(registry: Registry, info: PluginInfo) -> None:
    """Take back what a plugin registered before one of its hooks raised: a broken plugin adds nothing."""
    for kind, keys in info.registered.items():
        for key in keys:
            if kind == "envs":
                registry.envs.remove(key)
                registry.aliases.pop(key, None)
            else:
                tables: dict[str, Any] = {"tools": registry.tools, "wrappers": registry.wrappers}
                tables.get(kind, registry.commands).remove(key)
    info.registered.clear()


def build_registry(
    settings: PluginSettings | None = None,
    *,
    entry_points: Iterable[md.EntryPoint] | None = None,
    extra_plugins: Iterable[tuple[str, Any]] = (),
) -> tuple[Registry, list[PluginInfo]]:
    """Discover plugins and collect their declarations into a fresh registry.

    Same arguments as :func:`discover`. Each problem is reported as a
    :class:`~gem_core.errors.PluginWarning`, or raised in strict mode.

    Returns:
        The registry and one :class:`PluginInfo` per plugin seen (loaded or not).

    Raises:
        PluginLoadError: strict mode, and a plugin failed to import, its hook raised, or it
            targets another plugin API; the message ends with a hint.
        DuplicateIdError: strict mode, and two plugins declared one id; names both.
        NamespaceError: strict mode, and a plugin declared an id in a namespace another
            distribution owns.
    """
    found = discover(settings, entry_points=entry_points, extra_plugins=extra_plugins)
    found.raise_if_broken()
    found.warn()
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
    """The process-wide discovery result, built on first use; never raises for a plugin's fault.

    The first call reports each problem once as a :class:`~gem_core.errors.PluginWarning`
    (not in strict mode, where :func:`get_registry` raises instead).
    """
    global _state
    if _state is None:
        with _lock:
            if _state is None:
                found = discover()
                _state = found
                if not found.settings.strict:
                    found.warn()
    return _state


def get_registry() -> Registry:
    """The process-wide registry, built on first use from installed plugins.

    A broken plugin is left out (and reported once); the others' ids work.

    Raises:
        PluginLoadError: ``GEM_CORE_STRICT_PLUGINS`` is set and a plugin is broken (also
            :class:`~gem_core.errors.DuplicateIdError` or :class:`~gem_core.errors.NamespaceError`
            for refused declarations).
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
