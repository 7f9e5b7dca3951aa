"""The ``gem`` command line: list, inspect, play and check envs; report plugins; scaffold packages.

Exit codes (docs/cli.md lists the same):

* 0: success.
* 1: an env failed: ``gem check`` found a violation, or the env raised while being
  built, reset or stepped.
* 2: bad input: unknown id or namespace, bad option, bad ``--kw`` or configuration.
* 3: a plugin is broken (failed to import, hook raised, another plugin API, refused
  declarations, misspelled hook, an entry point that cannot be imported) and the
  command needed it: ``gem plugins`` and ``gem check --all`` whenever any plugin has a
  problem, ``gem check --all -n NS`` when a plugin of that namespace has one, and every
  command under ``GEM_CORE_STRICT_PLUGINS=1``. Otherwise a broken plugin is left out,
  said on stderr, and the command works with the others (``gem list`` exits 0).
  A plugin's own command that cannot be loaded or crashes outside gem's errors exits 3 too.
* 130: interrupted (Ctrl-C).

Each of gem's own subcommands is one :class:`Command` in :data:`COMMANDS`: adding a command
is writing its ``run`` function and one ``@command(...)`` line. Plugins add commands through
the ``register_commands`` hook (:mod:`gem_core.hookspecs`); gem_core names no plugin. They are
looked up only when the word after ``gem`` is not one of gem's own (and for ``gem --help``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import textwrap
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from gem_core.cli_values import parse_kwargs
from gem_core.errors import (
    ConfigError,
    DuplicateIdError,
    EntryPointError,
    EnvCheckError,
    EnvNotFound,
    GemCoreError,
    NamespaceError,
    PluginCommandError,
    PluginLoadError,
    PluginValidationError,
    PluginWarning,
    RegistrationError,
)

if TYPE_CHECKING:
    from gem_core.plugins import Discovery
    from gem_core.registry import CommandSpec, Registry

__all__ = ["COMMANDS", "Command", "Streams", "build_parser", "command", "main", "plugin_commands", "registry_for"]

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_PLUGIN_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
#: Errors that mean a plugin is broken (exit 3); checked before the bad-input ones they derive from.
_PLUGIN_ERRORS = (
    PluginLoadError,
    PluginCommandError,
    DuplicateIdError,
    NamespaceError,
    EntryPointError,
    PluginValidationError,
)


class EnvFailed(GemCoreError):
    """An env raised while the CLI built, reset or stepped it (exit 1)."""


@dataclass(frozen=True)
class Streams:
    """Where a command reads and writes."""

    out: TextIO
    inp: TextIO
    err: TextIO


@dataclass(frozen=True)
class Command:
    """One ``gem`` subcommand.

    Attributes:
        name: The word after ``gem``.
        help: One line for ``gem --help``.
        arguments: Adds the command's options to its argparse subparser.
        run: Runs the command; returns the exit code. Errors from the
            :mod:`gem_core.errors` hierarchy are turned into exit codes by :func:`main`.
    """

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], object]
    run: Callable[[argparse.Namespace, Streams], int]


#: Every subcommand, in the order ``gem --help`` lists them.
COMMANDS: dict[str, Command] = {}


RunFn = Callable[[argparse.Namespace, Streams], int]


def command(
    name: str, summary: str, arguments: Callable[[argparse.ArgumentParser], object] = lambda p: None
) -> Callable[[RunFn], RunFn]:
    """Register the decorated function as ``gem NAME`` (``summary`` is its ``--help`` line)."""

    def decorate(run: RunFn) -> RunFn:
        COMMANDS[name] = Command(name, summary, arguments, run)
        return run

    return decorate


# ---------------------------------------------------------------------------- helpers


def _table(rows: Sequence[tuple[str, ...]], out: TextIO) -> None:
    if not rows:
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)] + [row[-1]]
        out.write("  ".join(cells).rstrip() + "\n")


def _discovery() -> Discovery:
    """The discovery; its problems are the commands' to report (as a section), not warnings."""
    from gem_core.plugins import get_discovery

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PluginWarning)
        return get_discovery()


def _report_problems(found: Discovery, streams: Streams, *, needed: bool = False) -> None:
    """A section on stderr: each plugin problem in full (``needed``), or one line naming the plugins."""
    if not found.problems:
        return
    if needed:
        streams.err.write(f"\ngem: {len(found.problems)} plugin problem(s); everything else works:\n")
        for problem in found.problems:
            streams.err.write("  - " + textwrap.indent(str(problem.error), "    ").lstrip() + "\n")
        streams.err.write("Run 'gem plugins' for every plugin's status.\n")
        return
    names = "; ".join(p.label for p in found.broken) or "see 'gem plugins'"
    streams.err.write(f"gem: note: plugins with problems, not needed here: {names}. Run 'gem plugins' for details.\n")


def _registry() -> Registry:
    """The registry for a command about every id: plugin problems are reported, not fatal (unless strict)."""
    found = _discovery()
    found.raise_if_broken()
    return found.registry


def _needed_error(found: Discovery, namespace: str) -> GemCoreError | None:
    """The error of a broken plugin named for ``namespace``: the likely provider of ids that are missing."""
    from gem_core.plugins import named_for

    for info in found.broken:
        named = named_for(info.distribution, namespace)
        if info.status == "broken" and (named or info.name == namespace):
            return found.problems_of([info.name])[0].error
    return None


def registry_for(streams: Streams, *, env_id: str | None = None, namespace: str | None = None) -> Registry:
    """The registry for a command about one id or namespace: other plugins' problems do not fail it.

    For plugins' commands too: ``registry_for(streams, env_id=args.env_id).resolve(args.env_id)``
    fails an unknown id (exit 2) the way gem's own commands do.

    Raises:
        GemCoreError: strict mode and a plugin has a problem; or the id or namespace is
            missing and a broken plugin named for that namespace is the likely provider.
    """
    found = _discovery()
    found.raise_if_broken()
    registry = found.registry
    if not found.problems:
        return registry
    namespace = namespace or (env_id.split(":", 1)[0] if env_id and ":" in env_id else None)
    missing = (env_id is not None and env_id not in registry.envs and env_id not in registry.aliases) or (
        env_id is None and namespace is not None and not registry.env_ids(namespace=namespace)
    )
    if missing and namespace is not None:
        error = _needed_error(found, namespace)
        if error is not None:
            raise error
    _report_problems(found, streams)
    return registry


def _version(found: Discovery, plugin: str | None) -> str | None:
    info = found.info(plugin)
    return info.version if info is not None else None


def _build(registry: Registry, env_id: str, kwargs: dict[str, Any]) -> Any:
    """Make an env; an exception from the env's own code becomes :class:`EnvFailed`."""
    try:
        return registry.make(env_id, **kwargs)
    except GemCoreError:
        raise
    except Exception as exc:
        shown = f" with {json.dumps(kwargs, default=repr)}" if kwargs else ""
        raise EnvFailed(f"cannot build env {env_id!r}{shown}: {type(exc).__name__}: {exc}") from exc


# ---------------------------------------------------------------------------- commands


def _list_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--namespace", "-n", help="only this namespace, e.g. game")
    p.add_argument("--tag", "-t", help="only envs with this tag, e.g. multi-turn")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-aliases", action="store_true", help="do not list aliases")


@command("list", "list registered env ids", _list_args)
def cmd_list(args: argparse.Namespace, streams: Streams) -> int:
    from gem_core import list_cache

    out = streams.out
    # The cached listing (no plugin import) while the installed plugins are unchanged; else discover.
    found: Discovery | None = None
    cache_key = list_cache.key()
    listing = list_cache.load(cache_key) if cache_key is not None else None
    if listing is None:
        found = _discovery()
        found.raise_if_broken()
        listing = list_cache.listing_of(found)
        if cache_key is not None and not found.problems:
            list_cache.store(cache_key, listing)
    rows = listing.env_ids(namespace=args.namespace, tag=args.tag)
    if args.json:
        entries = [
            {
                "id": r.id,
                "distribution": r.distribution,
                "version": r.version,
                "tags": list(r.tags),
                "description": r.description,
            }
            for r in rows
        ]
        json.dump(entries, out, indent=2)
        out.write("\n")
    elif not rows:
        what = " ".join(f"{k}={v!r}" for k, v in (("namespace", args.namespace), ("tag", args.tag)) if v)
        out.write(f"no envs match {what or 'the registry'}; run 'gem plugins' to see what is installed\n")
    else:
        _table(
            [("ID", "DISTRIBUTION", "DESCRIPTION")] + [(r.id, r.distribution or "-", r.description) for r in rows], out
        )
        ids = {r.id for r in rows}
        aliases = [a for a in listing.aliases if a.target in ids]
        if aliases and not args.no_aliases:
            out.write("\naliases:\n")
            for a in sorted(aliases, key=lambda a: a.id):
                out.write(f"  {a.id} -> {a.target}{' (deprecated)' if a.deprecated else ''}\n")
    if found is not None:
        _report_problems(found, streams, needed=True)
    return EXIT_OK


@command("info", "show an env's spec", lambda p: p.add_argument("env_id"))
def cmd_info(args: argparse.Namespace, streams: Streams) -> int:
    out = streams.out
    registry = registry_for(streams, env_id=args.env_id)
    spec, alias = registry.resolve(args.env_id)
    if alias is not None:
        state = "deprecated alias" if alias.deprecated else "alias"
        out.write(f"{alias.id} is a {state} of {alias.target}. {alias.message}\n\n".replace(". \n", ".\n"))
    entry = spec.entry_point if isinstance(spec.entry_point, str) else repr(spec.entry_point)
    fields = [
        ("id", spec.id),
        ("description", spec.description or "-"),
        ("entry point", entry),
        ("distribution", " ".join(filter(None, (spec.distribution, _version(_discovery(), spec.plugin)))) or "-"),
        ("plugin", spec.plugin or "-"),
        ("tags", ", ".join(spec.tags) or "-"),
        ("kwargs", json.dumps(spec.kwargs, default=repr) if spec.kwargs else "-"),
        ("wrappers", ", ".join(map(str, spec.wrappers)) or "-"),
        ("cpu bound", "yes" if spec.cpu_bound else "no"),
        ("aliases", ", ".join(a.id for a in registry.aliases.values() if a.target == spec.id) or "-"),
    ]
    width = max(len(k) for k, _ in fields)
    for key, value in fields:
        out.write(f"{key.ljust(width)}  {value}\n")
    return EXIT_OK


def _plugins_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--bridges",
        action="store_true",
        help="which bridges to other ecosystems (OpenEnv, verifiers, MCP, the trainers) are usable here, and fixes",
    )


def _write_bridges(out: TextIO, as_json: bool) -> None:
    from gem_core.bridges import BRIDGES, bridge_status

    found = [bridge_status(bridge) for bridge in BRIDGES]
    if as_json:
        rows = [
            {
                "bridge": s.bridge.name,
                "distribution": s.bridge.distribution,
                "extra": s.bridge.extra,
                "version": s.version,
                "usable": s.usable,
                "requirements": s.requirements,
                "versions": s.versions,
                "problems": s.problems,
            }
            for s in found
        ]
        json.dump(rows, out, indent=2)
        out.write("\n")
        return
    for s in found:
        package = s.bridge.distribution + (f"[{s.bridge.extra}]" if s.bridge.extra else "")
        state = "usable" if s.usable else "not installed" if s.version is None else "NOT USABLE"
        out.write(f"{s.bridge.name}  [{package} {s.version or '-'}]  {state}\n")
        versions = [f"{name} {v}" for name, v in s.versions.items() if not name.startswith("gem-")]
        if versions:
            out.write(f"    on: {', '.join(versions)}\n")
        for problem in s.problems:
            out.write(f"    {'fix' if s.version is None else 'problem'}: {problem}\n")


@command("plugins", "list plugins (broken ones too), their distributions and what they registered", _plugins_args)
def cmd_plugins(args: argparse.Namespace, streams: Streams) -> int:
    out = streams.out
    if args.bridges:  # a report on the environment: never a failure in itself
        _write_bridges(out, args.json)
        return EXIT_OK
    found = _discovery()
    failed = bool(found.problems)
    if args.json:
        json.dump([vars(p) for p in found.plugins], out, indent=2)
        out.write("\n")
        return EXIT_PLUGIN_ERROR if failed else EXIT_OK
    for p in found.plugins:
        if p.builtin:
            dist = "gem-core (built-in)"
        else:
            dist = f"{p.distribution} {p.version or ''}".strip() if p.distribution else f"plugins folder: {p.source}"
        out.write(f"{p.name}  [{dist}]  {p.status}\n")
        for problem in found.problems_of([p.name]):
            out.write(textwrap.indent(str(problem.error), "    error: ") + "\n")
        if p.namespaces:
            out.write(f"    owns namespaces: {', '.join(p.namespaces)}\n")
        for kind, names in sorted(p.registered.items()):
            shown = ", ".join(names[:8]) + (f", ... ({len(names)} in all)" if len(names) > 8 else "")
            out.write(f"    {kind}: {shown}\n")
    for problem in found.problems:
        if problem.plugin is None:  # not one plugin's fault, e.g. a GEM_CORE_PLUGINS_DIR that is no folder
            streams.err.write(f"gem: plugin error: {problem.error}\n")
    return EXIT_PLUGIN_ERROR if failed else EXIT_OK


def _play_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("env_id")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--kw", action="append", default=[], metavar="KEY=VALUE", help="constructor override")
    p.add_argument("--loop", action="store_true", help="start a new episode after each one")
    p.add_argument(
        "--model-format",
        action="store_true",
        help="answer exactly as a model must (ignore the env's play_kwargs for people)",
    )


@command("play", "play an env in the terminal", _play_args)
def cmd_play(args: argparse.Namespace, streams: Streams) -> int:
    from gem_core.core import to_sync
    from gem_core.testing import _check_reset_return, _check_step_return

    out, inp = streams.out, streams.inp
    registry = registry_for(streams, env_id=args.env_id)
    kwargs = parse_kwargs(args.kw)
    if not args.model_format:  # the env's settings for a person typing moves (e.g. no \boxed{} needed)
        try:
            env_class = registry.spec(args.env_id).load()
        except EntryPointError:
            env_class = None  # _build reports it with the owner and a hint
        kwargs = {**getattr(env_class, "metadata", {}).get("play_kwargs", {}), **kwargs}
    env = to_sync(_build(registry, args.env_id, kwargs))
    interactive = inp.isatty()
    episodes = 0
    try:
        while True:
            seed = None if args.seed is None else args.seed + episodes
            obs, _ = _checked(args.env_id, _check_reset_return, _env_call(args.env_id, "reset", env.reset, seed=seed))
            episodes += 1
            out.write(f"\n=== {args.env_id} (episode {episodes}) ===\n{obs}\n")
            total, turn = 0.0, 0
            while True:
                out.write("\n> " if interactive else "\n")
                out.flush()
                line = inp.readline()
                if not line or line.strip() in {"/quit", "/exit"}:
                    out.write(f"\nbye. return this episode: {total:g}\n")
                    return EXIT_OK
                action = line.rstrip("\n")
                step = _env_call(args.env_id, "step", env.step, action)
                obs, reward, terminated, truncated, info = _checked(args.env_id, _check_step_return, step, action)
                turn += 1
                total += reward
                out.write(f"{obs}\n[turn {turn}] reward {reward:+g}, return {total:g}")
                if info.get("format_error"):
                    out.write("  (format error)")
                out.write("\n")
                if terminated or truncated:
                    why = "solved" if info.get("success") else ("turn limit reached" if truncated else "episode over")
                    out.write(f"\n*** done: {why}. return {total:g} in {turn} turns ***\n")
                    break
            if not args.loop:
                return EXIT_OK
    finally:
        _env_call(args.env_id, "close", env.close)


def _env_call(env_id: str, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except GemCoreError:
        raise
    except Exception as exc:
        raise EnvFailed(f"env {env_id!r} raised in {what}(): {type(exc).__name__}: {exc}") from exc


def _checked(env_id: str, check: Callable[..., Any], *args: Any) -> Any:
    """What the env returned, checked against the Env contract; a wrong type is :class:`EnvFailed`."""
    try:
        return check(*args)
    except EnvCheckError as exc:
        raise EnvFailed(f"env {env_id!r} broke the Env contract: {exc}") from exc


def _check_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("env_id", nargs="?")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kw", action="append", default=[], metavar="KEY=VALUE", help="constructor override")
    p.add_argument("--all", action="store_true", help="check every registered id")
    p.add_argument("--namespace", "-n", help="with --all: only this namespace (the CI step of an env package)")


@command("check", "run the env checker on one id, or on every id (of a namespace)", _check_args)
def cmd_check(args: argparse.Namespace, streams: Streams) -> int:
    out = streams.out
    if args.all == (args.env_id is not None):
        raise ConfigError("gem check needs an env id, or --all (optionally with --namespace NS), not both")
    if args.all and args.namespace:
        registry = registry_for(streams, namespace=args.namespace)
        ids = registry.env_ids(namespace=args.namespace)
    elif args.all:
        registry = _registry()
        ids = registry.env_ids()
    else:
        registry = registry_for(streams, env_id=args.env_id)
        registry.resolve(args.env_id)  # unknown id: exit 2, not a failed check
        ids = [args.env_id]
    if not ids:
        known = sorted({s.namespace for s in registry.envs.values()})
        raise EnvNotFound(f"no env ids in namespace {args.namespace!r}; namespaces: {', '.join(known)}")
    kwargs = parse_kwargs(args.kw)
    codes = [_check_one(registry, env_id, kwargs, args.seed, out) for env_id in ids]
    if len(ids) > 1:
        failed = sum(c != EXIT_OK for c in codes)
        out.write(f"\n{len(ids) - failed} ok, {failed} failed\n")
    if args.all:  # the namespace's own plugins' problems (all plugins' without -n) fail the check too
        found = _discovery()
        owners = {registry.envs.get(i).plugin for i in ids}  # type: ignore[union-attr]
        owners |= {p.name for p in found.plugins if args.namespace in p.namespaces}
        problems = found.problems_of(owners) if args.namespace else found.problems
        if problems:
            streams.err.write("".join(f"gem: plugin error: {p.error}\n" for p in problems))
            codes.append(EXIT_PLUGIN_ERROR)
    return max(codes)


def _check_one(registry: Registry, env_id: str, kwargs: dict[str, Any], seed: int, out: TextIO) -> int:
    """Check one id; the exit code its outcome deserves (see the module docstring)."""
    from gem_core.testing import check_env

    try:
        env = _build(registry, env_id, kwargs)
        check_env(env, seed=seed, env_factory=functools.partial(registry.make, env_id, **kwargs))
    except Exception as exc:
        code = _exit_code(exc)
        out.write(f"FAIL  {env_id}\n{textwrap.indent(f'{type(exc).__name__}: {exc}', '      ')}\n")
        return EXIT_CHECK_FAILED if code is None else code
    out.write(f"ok    {env_id}\n")
    return EXIT_OK


def _new_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", choices=("env", "tool"), help="what the package provides")
    p.add_argument("name", help="env namespace or tool name: lower-case letters, digits, '_'")
    p.add_argument("--dir", help="where to create the package (default: ./gem-NAME)")


@command("new", "create a plugin package for an env or a tool, ready to test and publish", _new_args)
def cmd_new(args: argparse.Namespace, streams: Streams) -> int:
    from pathlib import Path

    from gem_core.scaffold import scaffold

    written = scaffold(args.kind, args.name, Path(args.dir) if args.dir else None)
    root = written[0].parent
    streams.out.write(f"created {root}\n")
    for path in written:
        streams.out.write(f"  {path.relative_to(root)}\n")
    check = f"gem check --all --namespace {args.name}" if args.kind == "env" else "gem plugins"
    streams.out.write(f"\nnext:\n  cd {root}\n  pip install -e .[test]\n  {check}\n  pytest\n")
    return EXIT_OK


def _eval_args(parser: argparse.ArgumentParser) -> None:
    from gem_core.eval.cli import eval_arguments

    eval_arguments(parser)


@command("eval", "evaluate a model on envs (OpenAI-compatible server, local HF model or vLLM)", _eval_args)
def cmd_eval(args: argparse.Namespace, streams: Streams) -> int:
    from gem_core.eval import cli as eval_cli  # httpx, rich and matplotlib load only for this command

    found = _discovery()  # broken plugins: said once here, then left out
    found.raise_if_broken()
    _report_problems(found, streams)
    return eval_cli.cmd_eval(args, streams.out)


def _view_args(parser: argparse.ArgumentParser) -> None:
    from gem_core.eval.cli import view_arguments

    view_arguments(parser)


@command("view", "print the episodes of a gem eval trace readably", _view_args)
def cmd_view(args: argparse.Namespace, streams: Streams) -> int:
    from gem_core.eval import cli as eval_cli

    return eval_cli.cmd_view(args, streams.out)


# ---------------------------------------------------------------------------- plugins' commands


def plugin_commands() -> dict[str, Command]:
    """The commands installed plugins declare (``register_commands``), by name; never raises for a plugin's fault.

    A plugin whose hook raised, or whose command name is taken (by gem's own commands or by
    another plugin), is a discovery problem reported with the others (``gem plugins``).
    """
    found = _discovery()
    if found.settings.strict:
        found.raise_if_broken()
    return {
        spec.name: Command(
            spec.name,
            spec.description,
            functools.partial(_plugin_arguments, spec),
            functools.partial(_run_plugin_command, spec, found),
        )
        for spec in found.registry.commands.values()
        if spec.name not in COMMANDS  # gem's own (declared by the built-in plugin, which reserves them)
    }


def _command_owner(spec: CommandSpec, found: Discovery) -> str:
    info = found.info(spec.plugin)
    return info.label if info is not None else f"plugin {spec.plugin!r}"


def _plugin_arguments(spec: CommandSpec, parser: argparse.ArgumentParser) -> None:
    found = _discovery()
    try:
        arguments = spec.load_arguments()
    except EntryPointError as exc:
        raise PluginCommandError(
            f"command {spec.name!r} of {_command_owner(spec, found)}: its options cannot be loaded: {exc}."
            f" Reinstall {spec.distribution or 'the plugin'}, or report this to its authors."
        ) from exc
    if arguments is None:
        return
    try:
        arguments(parser)
    except Exception as exc:
        raise PluginCommandError(
            f"command {spec.name!r} of {_command_owner(spec, found)}: adding its options raised"
            f" {type(exc).__name__}: {exc}. Report this to the authors of {spec.distribution or 'the plugin'}."
        ) from exc


def _run_plugin_command(spec: CommandSpec, found: Discovery, args: argparse.Namespace, streams: Streams) -> int:
    """Run a plugin's command; a failure that is not a gem error becomes a :class:`PluginCommandError`."""
    owner = _command_owner(spec, found)
    try:
        run = spec.load()
    except EntryPointError as exc:
        raise PluginCommandError(
            f"command {spec.name!r} of {owner} cannot be loaded: {exc}."
            f" Reinstall {spec.distribution or 'the plugin'} (with its extras), or report this to its authors."
        ) from exc
    try:
        code = run(args, streams, **spec.kwargs)
    except (GemCoreError, KeyboardInterrupt, BrokenPipeError):
        raise
    except Exception as exc:
        raise PluginCommandError(
            f"command {spec.name!r} of {owner} failed: {type(exc).__name__}: {exc}."
            f" Report this to the authors of {spec.distribution or 'the plugin'}."
        ) from exc
    if not isinstance(code, int) or isinstance(code, bool):
        raise PluginCommandError(
            f"command {spec.name!r} of {owner} returned {code!r}, not an exit code (int)."
            f" Report this to the authors of {spec.distribution or 'the plugin'}."
        )
    return code


# ---------------------------------------------------------------------------- entry point


def build_parser(only: str | None = None, commands: dict[str, Command] | None = None) -> argparse.ArgumentParser:
    """The argparse parser with one subparser per command.

    Args:
        only: Give only this command's subparser its options (the others get their help
            line, all ``gem --help`` shows): some commands' options import heavy modules.
        commands: The commands (default: gem's own, :data:`COMMANDS`); :func:`main` adds the
            plugins' when the command asked for is not one of gem's own.
    """
    parser = argparse.ArgumentParser(prog="gem", description="Text environments for LLM agents.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in (COMMANDS if commands is None else commands).values():
        subparser = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        if only is None or cmd.name == only:
            cmd.arguments(subparser)
    return parser


def _exit_code(exc: BaseException) -> int | None:
    """The documented exit code for an error, or ``None`` for one that is not gem's to explain."""
    if isinstance(exc, _PLUGIN_ERRORS):
        return EXIT_PLUGIN_ERROR
    if not isinstance(exc, GemCoreError):
        return None
    if isinstance(exc, (LookupError, ConfigError, RegistrationError)):
        return EXIT_BAD_INPUT
    return EXIT_CHECK_FAILED


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: TextIO | None = None,
    stdin: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the CLI; returns the exit code."""
    streams = Streams(stdout or sys.stdout, stdin or sys.stdin, stderr or sys.stderr)
    words = sys.argv[1:] if argv is None else list(argv)
    first = words[0] if words else None
    try:
        commands = dict(COMMANDS)
        if first not in COMMANDS:  # a plugin's command, or --help listing them all: ask the plugins
            commands.update(plugin_commands())
            if first is not None and not first.startswith("-") and first not in commands:
                _report_problems(_discovery(), streams, needed=True)  # a broken plugin may be the one declaring it
        # Options only for the command asked for; none for `gem --help` (a plugin's options may fail to load).
        parser = build_parser(first if first in commands else "", commands)
        try:
            args = parser.parse_args(words)
        except SystemExit as exc:
            return int(exc.code or 0) and EXIT_BAD_INPUT
        return commands[args.command].run(args, streams)
    except GemCoreError as exc:
        code = _exit_code(exc)
        kind = "plugin error" if code == EXIT_PLUGIN_ERROR else "error"
        streams.err.write(f"gem: {kind}: {exc}\n")
        return EXIT_CHECK_FAILED if code is None else code
    except BrokenPipeError:  # e.g. `gem list | head`: the reader left, which is not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        streams.err.write("\ninterrupted\n")
        return EXIT_INTERRUPTED
    except Exception as exc:  # a defect of gem's own: still one line, never a traceback
        streams.err.write(f"gem: unexpected error: {type(exc).__name__}: {exc} (please report it)\n")
        return EXIT_CHECK_FAILED


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
