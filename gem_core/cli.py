"""The ``gem`` command line: list, inspect, play and check envs; report plugins.

Exit codes: 0 success, 1 a check failed, 2 bad input (unknown id, bad option),
3 a plugin could not be loaded.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, TextIO

from gem_core.errors import ConfigError, EnvCheckError, GemCoreError, PluginLoadError, RegistrationError

__all__ = ["main"]

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_PLUGIN_ERROR = 0, 1, 2, 3


def _parse_kwargs(pairs: Sequence[str]) -> dict[str, Any]:
    """``key=value`` pairs; values are JSON when they parse as JSON, else strings."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--kw expects key=value, got {pair!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def _table(rows: Sequence[tuple[str, ...]], out: TextIO) -> None:
    if not rows:
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)] + [row[-1]]
        out.write("  ".join(cells).rstrip() + "\n")


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    from gem_core.plugins import get_registry

    registry = get_registry()
    ids = registry.env_ids(namespace=args.namespace, tag=args.tag)
    specs = [registry.spec(i) for i in ids]
    if args.json:
        json.dump(
            [
                {"id": s.id, "distribution": s.distribution, "tags": list(s.tags), "description": s.description}
                for s in specs
            ],
            out,
            indent=2,
        )
        out.write("\n")
        return EXIT_OK
    if not specs:
        what = " ".join(f"{k}={v!r}" for k, v in (("namespace", args.namespace), ("tag", args.tag)) if v)
        out.write(f"no envs match {what or 'the registry'}; run 'gem plugins' to see what is installed\n")
        return EXIT_OK
    _table([("ID", "DISTRIBUTION", "DESCRIPTION")] + [(s.id, s.distribution or "-", s.description) for s in specs], out)
    aliases = [a for a in registry.aliases.values() if a.target in ids]
    if aliases and not args.no_aliases:
        out.write("\naliases:\n")
        for a in sorted(aliases, key=lambda a: a.id):
            out.write(f"  {a.id} -> {a.target}{' (deprecated)' if a.deprecated else ''}\n")
    return EXIT_OK


def cmd_info(args: argparse.Namespace, out: TextIO) -> int:
    from gem_core.plugins import get_registry

    registry = get_registry()
    spec, alias = registry.resolve(args.env_id)
    if alias is not None:
        state = "deprecated alias" if alias.deprecated else "alias"
        out.write(f"{alias.id} is a {state} of {alias.target}. {alias.message}\n\n".replace(". \n", ".\n"))
    entry = spec.entry_point if isinstance(spec.entry_point, str) else repr(spec.entry_point)
    fields = [
        ("id", spec.id),
        ("description", spec.description or "-"),
        ("entry point", entry),
        ("distribution", spec.distribution or "-"),
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


def cmd_plugins(args: argparse.Namespace, out: TextIO) -> int:
    from gem_core.plugins import get_plugin_report

    report = get_plugin_report()
    if args.json:
        json.dump([vars(p) for p in report], out, indent=2)
        out.write("\n")
        return EXIT_OK
    for p in report:
        dist = "gem-core (built-in)" if p.builtin else f"{p.distribution or '?'} {p.version or ''}".strip()
        out.write(f"{p.name}  [{dist}]  {p.status}\n")
        if p.error:
            out.write(textwrap.indent(p.error, "    error: ") + "\n")
        for kind, names in sorted(p.registered.items()):
            shown = ", ".join(names[:8]) + (f", ... ({len(names)} in all)" if len(names) > 8 else "")
            out.write(f"    {kind}: {shown}\n")
    return EXIT_OK


def cmd_play(args: argparse.Namespace, out: TextIO, inp: TextIO) -> int:
    from gem_core.api import make
    from gem_core.core import to_sync
    from gem_core.plugins import get_registry

    kwargs = _parse_kwargs(args.kw)
    if not args.model_format:  # the env's settings for a person typing moves (e.g. no \boxed{} needed)
        env_class = get_registry().spec(args.env_id).load()
        kwargs = {**getattr(env_class, "metadata", {}).get("play_kwargs", {}), **kwargs}
    env = to_sync(make(args.env_id, **kwargs))
    interactive = inp.isatty()
    episodes = 0
    try:
        while True:
            obs, _ = env.reset(seed=None if args.seed is None else args.seed + episodes)
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
                obs, reward, terminated, truncated, info = env.step(action)
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
        env.close()


def cmd_check(args: argparse.Namespace, out: TextIO) -> int:
    from gem_core.api import make
    from gem_core.plugins import get_registry
    from gem_core.testing import check_env

    ids = get_registry().env_ids(namespace=args.namespace) if args.all else [args.env_id]
    if not args.all and args.env_id is None:
        raise ConfigError("gem check needs an env id, or --all")
    failed = 0
    kwargs = _parse_kwargs(args.kw)
    for env_id in ids:
        try:
            check_env(make(env_id, **kwargs), seed=args.seed, env_factory=functools.partial(make, env_id, **kwargs))
        except (EnvCheckError, GemCoreError) as exc:
            failed += 1
            out.write(f"FAIL  {env_id}\n{textwrap.indent(str(exc), '      ')}\n")
        else:
            out.write(f"ok    {env_id}\n")
    if len(ids) > 1:
        out.write(f"\n{len(ids) - failed} ok, {failed} failed\n")
    return EXIT_CHECK_FAILED if failed else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gem", description="Text environments for LLM agents.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="list registered env ids")
    p.add_argument("--namespace", "-n", help="only this namespace, e.g. game")
    p.add_argument("--tag", "-t", help="only envs with this tag, e.g. multi-turn")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-aliases", action="store_true", help="do not list aliases")

    p = sub.add_parser("info", help="show an env's spec")
    p.add_argument("env_id")

    p = sub.add_parser("plugins", help="list plugins, their distributions and what they registered")
    p.add_argument("--json", action="store_true")

    for name, help_text in (("play", "play an env in the terminal"), ("check", "run the env checker")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("env_id", nargs="?" if name == "check" else None)
        p.add_argument("--seed", type=int, default=None if name == "play" else 0)
        p.add_argument("--kw", action="append", default=[], metavar="KEY=VALUE", help="constructor override")
        if name == "play":
            p.add_argument("--loop", action="store_true", help="start a new episode after each one")
            p.add_argument(
                "--model-format",
                action="store_true",
                help="answer exactly as a model must (ignore the env's play_kwargs for people)",
            )
        else:
            p.add_argument("--all", action="store_true", help="check every registered id")
            p.add_argument("--namespace", "-n", help="with --all: only this namespace")

    from gem_core.eval.cli import add_parsers as add_eval_parsers

    add_eval_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stdin: TextIO | None = None) -> int:
    """Run the CLI; returns the exit code."""
    out = stdout or sys.stdout
    inp = stdin or sys.stdin
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0) and EXIT_BAD_INPUT
    try:
        if args.command == "list":
            return cmd_list(args, out)
        if args.command == "info":
            return cmd_info(args, out)
        if args.command == "plugins":
            return cmd_plugins(args, out)
        if args.command == "play":
            return cmd_play(args, out, inp)
        if args.command in ("eval", "view"):
            from gem_core.eval import cli as eval_cli

            return eval_cli.cmd_eval(args, out) if args.command == "eval" else eval_cli.cmd_view(args, out)
        return cmd_check(args, out)
    except PluginLoadError as exc:
        sys.stderr.write(f"gem: plugin error: {exc}\nSet GEM_CORE_SKIP_BROKEN_PLUGINS=1 to skip broken plugins.\n")
        return EXIT_PLUGIN_ERROR
    except (LookupError, ConfigError, RegistrationError) as exc:
        sys.stderr.write(f"gem: error: {exc}\n")
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # e.g. `gem list | head`: the reader left, which is not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
