"""Registry of env, tool and wrapper specs, and ``make``.

Specs are pydantic models: a bad declaration fails with an error naming the field.
Entry points are ``"module:attr"`` strings imported only when something is made,
so listing ids never imports an env module.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gem_core.errors import (
    ConfigError,
    DuplicateIdError,
    EntryPointError,
    EnvNotFound,
    InvalidIdError,
    NamespaceError,
    RegistrationError,
    ToolNotFound,
    WrapperNotFound,
)

__all__ = [
    "ENV_ID_RE",
    "CommandSpec",
    "EnvAlias",
    "EnvSpec",
    "PluginManifest",
    "Registry",
    "ToolSpec",
    "WrapperRef",
    "WrapperSpec",
    "format_config_error",
    "load_entry_point",
    "parse_env_id",
]

#: ``namespace:Name[-vN][-variant]``, e.g. ``game:Sudoku-v0-easy``, ``math:GSM8K``, ``rg:leg_counting``.
ENV_ID_RE = re.compile(
    r"^(?P<namespace>[a-z][a-z0-9_]*):(?P<name>[A-Za-z0-9_.]+)"
    r"(?:-v(?P<version>\d+))?(?:-(?P<variant>[A-Za-z0-9_.][A-Za-z0-9_.\-]*))?$"
)
_NAMESPACE_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_ENTRY_POINT_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_COMMAND_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")


def parse_env_id(env_id: str) -> dict[str, str | None]:
    """Split an id into ``namespace``, ``name``, ``version`` and ``variant``.

    Raises:
        InvalidIdError: the id does not follow ``namespace:Name[-vN][-variant]``.
    """
    match = ENV_ID_RE.match(env_id)
    if match is None:
        raise InvalidIdError(
            f"invalid env id {env_id!r}: expected 'namespace:Name[-vN][-variant]' "
            "with a lower-case namespace, e.g. 'game:Sudoku-v0-easy' or 'math:GSM8K'"
        )
    return match.groupdict()


def load_entry_point(entry_point: str) -> Any:
    """Import ``"module:attr"`` (``attr`` may be dotted) and return the object.

    Raises:
        EntryPointError: the module or attribute does not exist or the import failed.
    """
    module_name, _, attr_path = entry_point.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise EntryPointError(f"cannot import module {module_name!r} of entry point {entry_point!r}: {exc}") from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise EntryPointError(
                f"entry point {entry_point!r}: {module_name!r} has no attribute {attr_path!r}"
            ) from exc
    return obj


def format_config_error(what: str, exc: ValidationError) -> str:
    """Render a pydantic error as one line per field: ``field: message (got value)``."""
    lines = [f"invalid {what}:"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        got = f" (got {err['input']!r})" if "input" in err and err["type"] != "missing" else ""
        lines.append(f"  {loc}: {err['msg']}{got}")
    return "\n".join(lines)


def _check_entry_point(value: Any) -> Any:
    if isinstance(value, str) and not _ENTRY_POINT_RE.match(value):
        raise ValueError(f"entry point must look like 'package.module:Attr', got {value!r}")
    if not isinstance(value, str) and not callable(value):
        raise ValueError("entry point must be a 'module:Attr' string or a callable")
    return value


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    entry_point: Union[str, Callable[..., Any]]
    kwargs: dict[str, Any] = Field(default_factory=dict)
    description: str = ""
    #: Filled in by the plugin manager: the distribution and plugin that declared the spec.
    distribution: str | None = None
    plugin: str | None = None

    _check_ep = field_validator("entry_point")(_check_entry_point)

    @property
    def owner(self) -> str:
        """Who declared the spec, for messages: ``plugin (distribution)``."""
        if self.plugin is None and self.distribution is None:
            return "<registered at runtime>"
        return f"{self.plugin or '?'} ({self.distribution or 'no distribution'})"

    def load_target(self) -> str:
        """The entry point as text: ``"module:attr"`` or the callable's qualified name."""
        ep = self.entry_point
        return ep if isinstance(ep, str) else f"{getattr(ep, '__module__', '?')}:{getattr(ep, '__qualname__', ep)}"

    def load(self) -> Any:
        """Import and return the entry point object."""
        if callable(self.entry_point):
            return self.entry_point
        return load_entry_point(self.entry_point)


#: A wrapper in a spec or ``make(wrappers=...)``: a registered name, ``(name, kwargs)``, or a callable ``env -> env``.
WrapperRef = Union[str, tuple[str, dict[str, Any]], Callable[[Any], Any]]


class EnvSpec(_Spec):
    """Declaration of an env id.

    Attributes:
        id: ``namespace:Name[-vN][-variant]``.
        entry_point: ``"module:Class"`` or a callable returning an env.
        kwargs: Default constructor kwargs; ``make`` overrides merge on top.
        description: One line shown by ``gem list``.
        tags: Free labels for filtering (``multi-turn``, ``offline``, ``tool``...).
        wrappers: Wrappers applied by ``make`` (innermost first), before the caller's.
        cpu_bound: Hint for vector envs: steps are CPU-heavy, run them in processes.
        num_cpus: CPUs one env reserves where resources are scheduled (the Ray backend).
    """

    id: str
    tags: tuple[str, ...] = ()
    wrappers: tuple[WrapperRef, ...] = ()
    cpu_bound: bool = False
    num_cpus: float = Field(default=1.0, ge=0)

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        if ENV_ID_RE.match(value) is None:
            raise ValueError(
                f"{value!r} is not 'namespace:Name[-vN][-variant]' (lower-case namespace), e.g. 'game:Sudoku-v0-easy'"
            )
        return value

    @property
    def namespace(self) -> str:
        """The part before ``:``."""
        return self.id.split(":", 1)[0]


class EnvAlias(BaseModel):
    """Another id for a registered env. A deprecated alias warns on every ``make``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    target: str
    deprecated: bool = False
    message: str = ""
    distribution: str | None = None
    plugin: str | None = None

    _check_id = field_validator("id", "target")(EnvSpec._check_id.__func__)  # type: ignore[attr-defined]


class ToolSpec(_Spec):
    """Declaration of a tool: ``make_tool(name)`` builds it from the entry point."""

    name: str
    tags: tuple[str, ...] = ()

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _TOOL_NAME_RE.match(value):
            raise ValueError(f"tool name {value!r} must be an identifier (letters, digits, '_', '.', '-')")
        return value


class WrapperSpec(_Spec):
    """Declaration of a wrapper usable by name in ``EnvSpec.wrappers`` and ``make(wrappers=...)``."""

    name: str

    _check_name = field_validator("name")(ToolSpec._check_name.__func__)  # type: ignore[attr-defined]


class CommandSpec(_Spec):
    """Declaration of a ``gem`` subcommand, returned by a plugin's ``register_commands`` hook.

    Attributes:
        name: The word after ``gem``: lower-case letters, digits and single dashes (``serve``).
        description: The one line ``gem --help`` shows for it (required).
        entry_point: ``"module:function"`` (or the function) that runs the command:
            ``run(args: argparse.Namespace, streams: gem_core.cli.Streams, **kwargs) -> int``
            (the exit code); raise an error of :mod:`gem_core.errors` for bad input.
        arguments: ``"module:function"`` (or the function) that adds the command's options to
            its ``argparse.ArgumentParser``; ``None`` for a command without options.
        kwargs: Keyword arguments given to ``run`` (one function may serve several commands).
    """

    name: str
    description: str = Field(min_length=1)
    arguments: Union[str, Callable[..., Any], None] = None

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _COMMAND_NAME_RE.match(value):
            raise ValueError(f"command name {value!r} must be lower-case letters and digits, words joined by '-'")
        return value

    @field_validator("arguments")
    @classmethod
    def _check_arguments(cls, value: Any) -> Any:
        return None if value is None else _check_entry_point(value)

    def load_arguments(self) -> Callable[..., Any] | None:
        """Import and return the function adding the command's options (``None`` when it has none)."""
        if self.arguments is None or callable(self.arguments):
            return self.arguments
        loaded: Callable[..., Any] = load_entry_point(self.arguments)
        return loaded


class PluginManifest(BaseModel):
    """What a plugin declares about itself, returned by its ``plugin_manifest`` hook.

    Attributes:
        api_version: The gem plugin API the plugin was written for
            (:data:`gem_core.plugins.PLUGIN_API_VERSION`); another version is refused.
        namespaces: Env-id namespaces the plugin's distribution owns. Env ids another
            distribution declares in them are refused.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    api_version: int
    namespaces: tuple[str, ...] = ()

    @field_validator("namespaces")
    @classmethod
    def _check_namespaces(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for namespace in value:
            if not _NAMESPACE_RE.match(namespace):
                raise ValueError(f"namespace {namespace!r} must be lower-case letters, digits and '_', e.g. 'mygames'")
        return value


_S = TypeVar("_S", bound=_Spec)


def own_name_fix(kind: str) -> str:
    """The fix for a plugin's author whose ``kind`` (``env id``, ``tool``...) collides with another plugin's."""
    if kind in {"env id", "alias"}:
        return "use an id in a namespace of your own (claimed in plugin_manifest)"
    return f"give the {kind} a name of your own (e.g. prefixed with your package's name)"


class _Table(Generic[_S]):
    """Name → spec mapping that refuses silent overwrites."""

    def __init__(self, kind: str, key: Callable[[_S], str]) -> None:
        self.kind = kind
        self._key = key
        self._specs: dict[str, _S] = {}

    def add(self, spec: _S, *, override: bool = False) -> None:
        key = self._key(spec)
        old = self._specs.get(key)
        if old is not None and not override:
            block = " or ".join(f"GEM_CORE_BLOCK_PLUGINS={s.plugin}" for s in (old, spec) if s.plugin) or None
            raise DuplicateIdError(
                f"{self.kind} {key!r} is registered twice: by {old.owner} and by {spec.owner}. Fix for the authors:"
                f" {own_name_fix(self.kind)}. Fix for users: uninstall or"
                f" block one of them ({block or 'GEM_CORE_BLOCK_PLUGINS=<plugin>'}); at runtime,"
                " register(..., override=True) replaces it."
            )
        self._specs[key] = spec

    def get(self, key: str) -> _S | None:
        return self._specs.get(key)

    def remove(self, key: str) -> None:
        self._specs.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._specs

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._specs))

    def __len__(self) -> int:
        return len(self._specs)

    def values(self) -> list[_S]:
        return [self._specs[k] for k in sorted(self._specs)]


class Registry:
    """Env, alias, tool and wrapper specs, plus the factories that build from them.

    The process-wide registry filled by plugins is :func:`gem_core.plugins.get_registry`;
    tests build their own ``Registry()`` instead of mutating the global one.
    """

    def __init__(self) -> None:
        self.envs: _Table[EnvSpec] = _Table("env id", lambda s: s.id)
        self.tools: _Table[ToolSpec] = _Table("tool", lambda s: s.name)
        self.wrappers: _Table[WrapperSpec] = _Table("wrapper", lambda s: s.name)
        #: ``gem`` subcommands that plugins add (gem's own commands are not here).
        self.commands: _Table[CommandSpec] = _Table("command", lambda s: s.name)
        self.aliases: dict[str, EnvAlias] = {}
        #: Namespace -> the distribution that owns it (declared in a plugin manifest).
        self.namespace_owners: dict[str, str] = {}
        #: Labels of plugins that failed to load, named when an id is not found (they may provide it).
        self.unavailable: list[str] = []
        self._lock = threading.RLock()

    def claim_namespace(self, namespace: str, owner: str) -> None:
        """Record that ``owner`` (a distribution) owns ``namespace``.

        Raises:
            NamespaceError: another distribution owns it already.
        """
        with self._lock:
            current = self.namespace_owners.setdefault(namespace, owner)
            if current != owner:
                raise NamespaceError(
                    f"namespace {namespace!r} is claimed by {current} and by {owner}; a namespace has one owner. "
                    "One of them must pick another namespace (or uninstall or block one)."
                )

    def _check_namespace(self, spec: EnvSpec | EnvAlias, override: bool) -> None:
        namespace = spec.id.split(":", 1)[0]
        owner = self.namespace_owners.get(namespace)
        if owner is None or override or spec.distribution == owner:
            return
        by = f"{spec.plugin} ({spec.distribution})" if spec.distribution else "a runtime register()"
        raise NamespaceError(
            f"env id {spec.id!r} from {by} is in namespace {namespace!r}, which {owner} owns. "
            "Use your own namespace; at runtime, register(..., override=True) adds to it anyway."
        )

    # ------------------------------------------------------------------ registration
    def add(self, spec: EnvSpec | EnvAlias | ToolSpec | WrapperSpec | CommandSpec, *, override: bool = False) -> None:
        """Register one declaration.

        Args:
            spec: The declaration.
            override: Replace a declaration with the same id or name, and allow an env id
                in a namespace another distribution owns.

        Raises:
            DuplicateIdError: the id or name is taken (unless ``override``).
            NamespaceError: the env id's namespace belongs to another distribution (unless ``override``).
            RegistrationError: an alias collides with an env id.
        """
        with self._lock:
            if isinstance(spec, (EnvSpec, EnvAlias)):
                self._check_namespace(spec, override)
            if isinstance(spec, EnvSpec):
                if spec.id in self.aliases and not override:
                    raise DuplicateIdError(
                        f"env id {spec.id!r} is already an alias of {self.aliases[spec.id].target!r}"
                    )
                self.envs.add(spec, override=override)
            elif isinstance(spec, EnvAlias):
                if spec.id in self.envs:
                    raise RegistrationError(f"alias {spec.id!r} collides with a registered env id")
                old = self.aliases.get(spec.id)
                if old is not None and not override:
                    raise DuplicateIdError(
                        f"alias {spec.id!r} is registered twice: by {old.plugin} ({old.distribution}) "
                        f"and by {spec.plugin} ({spec.distribution})"
                    )
                self.aliases[spec.id] = spec
            elif isinstance(spec, ToolSpec):
                self.tools.add(spec, override=override)
            elif isinstance(spec, WrapperSpec):
                self.wrappers.add(spec, override=override)
            elif isinstance(spec, CommandSpec):
                self.commands.add(spec, override=override)
            else:
                raise RegistrationError(
                    f"cannot register {type(spec).__name__}: expected EnvSpec, EnvAlias, ToolSpec, WrapperSpec"
                    " or CommandSpec"
                )

    def register(
        self,
        id: str,  # noqa: A002 - mirrors EnvSpec.id
        entry_point: str | Callable[..., Any],
        *,
        override: bool = False,
        **fields: Any,
    ) -> EnvSpec:
        """Register an env id (convenience for ``add(EnvSpec(...))``).

        Args:
            id: ``namespace:Name[-vN][-variant]``.
            entry_point: ``"module:Class"`` or a callable returning an env.
            override: Replace an env already registered under ``id`` (the old spec is
                dropped), and allow an id in a namespace another distribution owns. Meant
                for a training script adjusting its own process; plugins cannot override.
            **fields: Other :class:`EnvSpec` fields (``kwargs``, ``description``, ``tags``...).

        Raises:
            ConfigError: a field is invalid (the message names it).
            DuplicateIdError: the id is taken (and not ``override``).
            NamespaceError: the namespace belongs to another distribution (and not ``override``).
        """
        try:
            spec = EnvSpec(id=id, entry_point=entry_point, **fields)
        except ValidationError as exc:
            raise ConfigError(format_config_error(f"EnvSpec {id!r}", exc)) from exc
        self.add(spec, override=override)
        return spec

    # ------------------------------------------------------------------ lookup
    def env_ids(self, *, namespace: str | None = None, tag: str | None = None) -> list[str]:
        """Registered env ids (aliases excluded), sorted; filters are exact matches."""
        return [
            s.id
            for s in self.envs.values()
            if (namespace is None or s.namespace == namespace) and (tag is None or tag in s.tags)
        ]

    def resolve(self, env_id: str) -> tuple[EnvSpec, EnvAlias | None]:
        """Find the spec behind an id or alias.

        Raises:
            EnvNotFound: with close matches and the installed env plugins.
        """
        alias = self.aliases.get(env_id)
        spec = self.envs.get(alias.target if alias else env_id)
        if spec is None:
            raise EnvNotFound(self._not_found_message(env_id, alias))
        return spec, alias

    def spec(self, env_id: str) -> EnvSpec:
        """The spec of an id or alias (no deprecation warning)."""
        return self.resolve(env_id)[0]

    def _not_found_message(self, env_id: str, alias: EnvAlias | None) -> str:
        if alias is not None:
            return f"alias {env_id!r} points at {alias.target!r}, which is not registered"
        known = list(self.envs) + list(self.aliases)
        close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.6)
        if not close:  # ids differing only by case or namespace are common mistakes
            lowered = {k.lower(): k for k in known}
            close = [lowered[env_id.lower()]] if env_id.lower() in lowered else []
            name = env_id.split(":", 1)[-1].lower()
            close += [k for k in known if k.split(":", 1)[-1].lower() == name and k not in close][:3]
        parts = [f"no env registered under {env_id!r}."]
        if close:
            parts.append("Did you mean " + ", ".join(repr(c) for c in close) + "?")
        plugins = sorted({f"{s.distribution or s.plugin}" for s in self.envs.values() if s.distribution or s.plugin})
        parts.append("Installed env plugins: " + (", ".join(plugins) if plugins else "none") + ".")
        if self.unavailable:
            parts.append(
                f"{len(self.unavailable)} plugin(s) failed to load and may provide it: {', '.join(self.unavailable)};"
                " 'gem plugins' says why."
            )
        parts.append("Run 'gem list' to see every id, or install the package that provides it.")
        return " ".join(parts)

    # ------------------------------------------------------------------ factories
    def make(
        self,
        env_id: str,
        *,
        wrappers: Sequence[WrapperRef] | None = None,
        **overrides: Any,
    ) -> Any:
        """Build the env registered under ``env_id`` (an :class:`~gem_core.core.Env` or ``AsyncEnv``).

        Args:
            env_id: A registered id or alias.
            wrappers: Extra wrappers applied outside the spec's own ones.
            **overrides: Constructor kwargs merged over ``spec.kwargs``.

        Raises:
            EnvNotFound: unknown id.
            ConfigError: the constructor rejected the kwargs (the message names the field).
            EntryPointError: the env module could not be imported; names the distribution and
                what to install.
        """
        spec, alias = self.resolve(env_id)
        if alias is not None and alias.deprecated:
            note = f" {alias.message}" if alias.message else ""
            warnings.warn(
                f"env id {env_id!r} is deprecated; use {alias.target!r} instead.{note}",
                DeprecationWarning,
                stacklevel=caller_stacklevel(),
            )
        env = build(spec, overrides)
        for ref in (*spec.wrappers, *(wrappers or ())):
            env = self.apply_wrapper(env, ref)
        return env

    def apply_wrapper(self, env: Any, ref: WrapperRef) -> Any:
        """Wrap ``env`` with a registered wrapper name, ``(name, kwargs)`` or a callable."""
        if callable(ref) and not isinstance(ref, str):
            return ref(env)
        name, kwargs = (ref, {}) if isinstance(ref, str) else ref
        spec = self.wrappers.get(name)
        if spec is None:
            known = ", ".join(self.wrappers) or "none"
            raise WrapperNotFound(f"no wrapper registered under {name!r}; registered wrappers: {known}")
        factory = spec.load()
        return _call_with_kwargs(factory, f"wrapper {name!r}", (env,), {**spec.kwargs, **kwargs})

    def make_tool(self, name: str, **overrides: Any) -> Any:
        """Build the tool registered under ``name``.

        Raises:
            ToolNotFound: unknown name (with close matches).
        """
        spec = self.tools.get(name)
        if spec is None:
            close = difflib.get_close_matches(name, list(self.tools), n=3)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            raise ToolNotFound(
                f"no tool registered under {name!r}.{hint} Registered tools: {', '.join(self.tools) or 'none'}."
            )
        return _call_with_kwargs(spec.load(), f"tool {name!r}", (), {**spec.kwargs, **overrides})


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def caller_stacklevel(also_skip: Sequence[str] = ()) -> int:
    """The ``stacklevel`` that makes a warning point at the first frame outside gem_core.

    A deprecation met through ``gem_core.make`` (or a wrapper, or the CLI) is the caller's
    to fix; the default filters only show a ``DeprecationWarning`` attributed to ``__main__``.

    Args:
        also_skip: Other package folders whose frames are skipped too (a shim over gem_core).
    """
    skipped = (_PACKAGE_DIR, *(os.path.join(os.path.abspath(p), "") for p in also_skip))
    frame, level = sys._getframe(1), 1  # the function calling warnings.warn
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(skipped):
        frame, level = frame.f_back, level + 1
    return level


def build(spec: EnvSpec, overrides: Mapping[str, Any]) -> Any:
    """Instantiate an env from its spec, validating kwargs against ``config_model`` if the class has one.

    The env refuses ``step`` outside an episode (:func:`~gem_core.core.enforce_episode_order`).

    Raises:
        EntryPointError: the env's module cannot be imported, or the entry point built no env;
            the message names the distribution that declared the id and, for a missing
            dependency, what to install.
    """
    try:
        factory = spec.load()
    except EntryPointError as exc:
        raise EntryPointError(f"env {spec.id!r} from {spec.owner}: {exc}. {_import_fix(spec, exc)}") from exc
    env = _call_with_kwargs(factory, f"env {spec.id!r}", (), {**spec.kwargs, **overrides})
    if not (callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None))):
        raise EntryPointError(
            f"env {spec.id!r} from {spec.owner}: its entry point {spec.load_target()!r} returned"
            f" {type(env).__name__}, not an env (an object with reset and step). Fix the entry point in"
            f" {spec.distribution or 'the package that declares it'}."
        )
    env.spec = spec
    # The core keeps the episode order (ResetNeeded outside an episode), so env authors write no bookkeeping.
    from gem_core.core import enforce_episode_order  # here: listing ids must not import numpy

    return enforce_episode_order(env)


def _import_fix(spec: _Spec, exc: EntryPointError) -> str:
    """What to do about an entry point that does not import: install the missing module, or reinstall."""
    cause = exc.__cause__
    dist = spec.distribution or "the package that provides it"
    missing = cause.name if isinstance(cause, ModuleNotFoundError) and cause.name else None
    top = missing.split(".")[0] if missing else None
    own_top = spec.load_target().partition(":")[0].split(".")[0]
    if top is not None and top != own_top and importlib.util.find_spec(top) is None:
        return (
            f"It imports {top!r}, which is not installed: install it (usually pip install {top}),"
            f" or reinstall {dist} with its extras."
        )
    return f"Reinstall {dist} (with its extras), or report this to its authors."


def _call_with_kwargs(factory: Any, what: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    config_model = getattr(factory, "config_model", None)
    if isinstance(config_model, type) and issubclass(config_model, BaseModel):
        try:
            kwargs = dict(config_model.model_validate(kwargs))
        except ValidationError as exc:
            raise ConfigError(format_config_error(f"configuration of {what}", exc)) from exc
    try:
        return factory(*args, **kwargs)
    except TypeError as exc:
        # Only rewrap argument errors raised by the call itself, not TypeErrors from deep inside.
        if exc.__traceback__ is not None and exc.__traceback__.tb_next is None:
            raise ConfigError(f"cannot build {what} with kwargs {sorted(kwargs)}: {exc}") from exc
        raise


def iter_specs(items: Iterable[Any]) -> Iterator[Any]:
    """Flatten one level of lists, as hooks may return a spec or a list of specs."""
    for item in items:
        if isinstance(item, (list, tuple)):
            yield from item
        elif item is not None:
            yield item
