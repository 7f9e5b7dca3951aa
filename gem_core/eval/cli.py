"""The ``gem eval`` and ``gem view`` subcommands (wired into :mod:`gem_core.cli`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from gem_core.cli_values import parse_kwargs
from gem_core.errors import ConfigError, EnvCheckError, GemCoreError

__all__ = ["cmd_eval", "cmd_view", "eval_arguments", "view_arguments"]

_EVAL_EXAMPLES = """examples:
  gem eval Qwen/Qwen3-0.6B game:GuessTheNumber-v0-easy --base-url http://localhost:8000/v1 -n 50
  gem eval ./my-model core:NumberGuess-v0 --backend hf -n 20 --trace out.jsonl --plot out.png
  gem eval --config eval.json --resume
  gem eval ./my-model game:GuessTheNumber-v0-easy --backend vllm --engine-kw enforce_eager=true --json
"""


def eval_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``gem eval``."""
    p.epilog = _EVAL_EXAMPLES
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("model", nargs="?", help="model name (server) or path (hf, vllm)")
    p.add_argument("env_ids", nargs="*", metavar="ENV_ID")
    p.add_argument("--config", help="a JSON file with any of these options (command-line values win)")
    p.add_argument("--backend", choices=["openai", "hf", "vllm"], default=None, help="default: openai")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
    p.add_argument("--api", choices=["chat", "completions"], default=None, help="openai API to call (default chat)")
    p.add_argument("--tokenizer", help="local tokenizer path (needed for --api completions)")
    p.add_argument(
        "--exact-tokens",
        action="store_true",
        default=None,
        help="--api completions: send token-id prompts, take the server's sampled ids (vLLM's return_token_ids)",
    )
    p.add_argument(
        "--engine-kw",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="vllm backend: a vllm.LLM option (JSON value), e.g. max_model_len=4096 enforce_eager=true",
    )
    p.add_argument("--api-key-env", default=None, help="variable holding the API key (default OPENAI_API_KEY)")
    p.add_argument("-n", "--num-episodes", type=int, default=None, help="episodes per env (default 10)")
    p.add_argument("--seed-start", type=int, default=None, help="episode i resets with seed-start + i (default 0)")
    p.add_argument("--max-turns", type=int, default=None)
    p.add_argument("--max-turn-tokens", type=int, default=None, help="per-turn generation cap")
    p.add_argument("--max-episode-tokens", type=int, default=None, help="token budget after the first prompt")
    p.add_argument("--system-prompt", default=None)
    p.add_argument("--temperature", type=float, default=None, help="default 0 (greedy)")
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--sampling-seed", type=int, default=None)
    p.add_argument("--concurrency", type=int, default=None, help="episodes in flight (default 8)")
    p.add_argument("--retries", type=int, default=None, help="retries of transient HTTP errors (default 5)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per request (default 120)")
    p.add_argument(
        "--wrapper", action="append", default=None, metavar="NAME[:JSON]", help='e.g. tools:\'{"tools": ["python"]}\''
    )
    p.add_argument("--kw", action="append", default=None, metavar="KEY=VALUE", help="env constructor override")
    p.add_argument("--trace", help="JSONL file: one record per finished episode, flushed as it ends")
    p.add_argument("--resume", action="store_true", help="skip (env, seed) pairs already in --trace")
    p.add_argument("--plot", help="write a PNG (success per env, return distribution)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def view_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``gem view``."""
    p.add_argument("trace")
    p.add_argument("--env", help="only this env id")
    p.add_argument("--seed", type=int, help="only this seed")
    p.add_argument("--index", type=int, help="only the record at this position (0-based)")
    p.add_argument("--errors", action="store_true", help="only episodes that failed")


_DEFAULTS: dict[str, Any] = {
    "backend": "openai",
    "api": "chat",
    "num_episodes": 10,
    "seed_start": 0,
    "temperature": 0.0,
    "top_p": 1.0,
    "sampling_seed": 0,
    "concurrency": 8,
    "retries": 5,
    "timeout": 120.0,
    "wrapper": [],
    "kw": [],
    "engine_kw": [],
    "env_ids": [],
}


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """Defaults, then the config file, then what the command line set."""
    options = dict(_DEFAULTS)
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as handle:
                loaded = json.load(handle)
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read --config {args.config}: {exc}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"--config {args.config} must hold a JSON object of options")
        unknown = set(loaded) - set(vars(args)) - {"env_ids"}
        if unknown:
            raise ConfigError(f"unknown option(s) in {args.config}: {sorted(unknown)}")
        options.update({k.replace("-", "_"): v for k, v in loaded.items()})
    for key, value in vars(args).items():
        given = value is not None and value != [] and value is not False
        if given or key not in options:
            options[key] = value
    if not options.get("model"):
        raise ConfigError("give the model (name for a server, path for hf/vllm) or put it in --config")
    if not options.get("env_ids"):
        raise ConfigError("give at least one env id (or env_ids in --config)")
    return options


def _wrappers(specs: list[Any]) -> list[Any]:
    out: list[Any] = []
    for spec in specs:
        if not isinstance(spec, str):
            out.append(tuple(spec) if isinstance(spec, list) else spec)
            continue
        name, sep, raw = spec.partition(":")
        if not sep:
            out.append(name)
            continue
        try:
            kwargs = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--wrapper {spec!r}: the part after ':' must be a JSON object ({exc})") from None
        out.append((name, kwargs))
    return out


def _preflight_envs(settings: Any) -> None:
    """Build and close each env once with the run's kwargs and wrappers, before any episode.

    A bad ``--kw``, a misspelled tool or wrapper, an unknown id fail here (exit 2) rather
    than as the same error recorded in every episode.
    """
    import warnings

    from gem_core.api import make

    for env_id in settings.env_ids:
        try:
            with warnings.catch_warnings():  # a deprecated alias warns again in the run
                warnings.simplefilter("ignore", DeprecationWarning)
                env = make(env_id, wrappers=list(settings.wrappers) or None, **settings.env_kwargs)
            env.close() if not asyncio.iscoroutinefunction(env.close) else asyncio.run(env.close())
        except GemCoreError as exc:
            raise type(exc)(f"{env_id}: {exc}") from exc
        except Exception as exc:
            raise EnvCheckError(f"cannot build {env_id} with these settings: {type(exc).__name__}: {exc}") from exc


def _probe_server(base_url: str, timeout_s: float) -> None:
    """Fail before the run if nothing answers at ``base_url`` (any HTTP answer counts as up)."""
    import httpx

    try:
        httpx.get(f"{base_url.rstrip('/')}/models", timeout=min(timeout_s, 10.0))
    except httpx.HTTPError as exc:
        raise ConfigError(
            f"nothing answers at --base-url {base_url} ({type(exc).__name__}: {exc}). Start the server, or fix the URL."
        ) from None


def _common_failure(records: list[dict[str, Any]]) -> str | None:
    """The cause when every episode failed (the most frequent one), else ``None``."""
    errors = [r.get("error") for r in records]
    if not errors or not all(errors):
        return None
    causes = [str(e) for e in errors]
    return max(set(causes), key=causes.count)


def cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    """Run an evaluation.

    With ``--json`` nothing but the summary reaches stdout: whatever the backend prints
    (vLLM's log lines, its engine processes' output) goes to stderr.

    Returns:
        0 when episodes ran (failed episodes are in the summary); 1 when every episode failed
        (the cause is written to stderr). Configuration errors raise (exit 2).
    """
    o = _options(args)
    if o.get("json"):
        # stdout carries the JSON summary alone: engines log there (vLLM, from its worker processes too)
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
        with _stdout_to_stderr():
            summary, code = _evaluate(o, out)
        out.write(summary)
        return code
    return _evaluate(o, out)[1]


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send this process's stdout (Python's and file descriptor 1, which child processes inherit) to stderr."""
    sys.stdout.flush()
    saved = os.dup(1)
    python_stdout = sys.stdout
    try:
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        yield
    finally:
        sys.stdout.flush()
        sys.stdout = python_stdout
        os.dup2(saved, 1)
        os.close(saved)


def _engine_kwargs(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return dict(value)
    try:
        return parse_kwargs(list(value))
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("--kw", "--engine-kw")) from None


def _evaluate(o: dict[str, Any], out: TextIO) -> tuple[str, int]:
    """Run the evaluation ``o`` describes; print the table (and plot) or return the JSON summary, and the exit code."""
    from gem_core.episode import EpisodeLimits
    from gem_core.eval.backends import Sampling, make_backend
    from gem_core.eval.report import plot, print_summary, summary_json
    from gem_core.eval.run import EvalSettings, summarize

    if o.get("api_key_env"):
        os.environ.setdefault("OPENAI_API_KEY", os.environ.get(o["api_key_env"], ""))
    settings = EvalSettings(
        env_ids=list(o["env_ids"]),
        num_episodes=int(o["num_episodes"]),
        seed_start=int(o["seed_start"]),
        limits=EpisodeLimits(
            max_turns=o.get("max_turns"),
            max_turn_tokens=o.get("max_turn_tokens"),
            max_episode_tokens=o.get("max_episode_tokens"),
            system_prompt=o.get("system_prompt"),
        ),
        concurrency=int(o["concurrency"]),
        env_kwargs=parse_kwargs(o["kw"]) if isinstance(o["kw"], list) else dict(o["kw"]),
        wrappers=_wrappers(list(o["wrapper"])),
        trace_path=o.get("trace"),
        resume=bool(o.get("resume")),
    )
    sampling = Sampling(
        temperature=float(o["temperature"]),
        top_p=float(o["top_p"]),
        max_tokens=int(o.get("max_turn_tokens") or 256),
        seed=o.get("sampling_seed"),
    )
    _preflight_envs(settings)
    if o["backend"] == "openai" and o.get("base_url"):
        _probe_server(o["base_url"], float(o["timeout"]))
    backend = make_backend(
        o["backend"],
        o["model"],
        sampling=sampling,
        base_url=o.get("base_url"),
        api=o["api"],
        tokenizer_path=o.get("tokenizer"),
        exact_tokens=bool(o.get("exact_tokens")),
        max_retries=int(o["retries"]),
        timeout_s=float(o["timeout"]),
        engine_kwargs=_engine_kwargs(o["engine_kw"]),
    )
    records = asyncio.run(_run(backend, settings, show_progress=not o.get("no_progress") and not o.get("json")))
    summaries = summarize(records)
    meta = {**backend.describe(), "trace": settings.trace_path, "retries": getattr(backend, "retries", 0)}
    if o.get("plot"):
        plot(summaries, records, o["plot"], title=f"{o['model']} ({o['backend']})")
    summary = ""
    if o.get("json"):
        summary = summary_json(summaries, meta) + "\n"
    else:
        print_summary(summaries, out, title=f"gem eval: {o['model']} ({o['backend']})")
        if o.get("plot"):
            out.write(f"plot: {o['plot']}\n")
    cause = _common_failure(records)
    if cause is not None:
        sys.stderr.write(f"gem eval: every episode failed; the most common cause: {cause}\n")
        return summary, 1
    return summary, 0


async def _run(backend: Any, settings: Any, *, show_progress: bool) -> list[dict[str, Any]]:
    from gem_core.eval.run import evaluate

    try:
        if not show_progress:
            return await evaluate(backend, settings)
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("success {task.fields[success]:.2f}"),
            TimeRemainingColumn(),
            console=None,
            transient=False,
        ) as bar:
            tasks = {
                env_id: bar.add_task(env_id, total=settings.num_episodes, success=0.0) for env_id in settings.env_ids
            }
            wins: dict[str, list[bool]] = {env_id: [] for env_id in settings.env_ids}

            def progress(env_id: str, record: dict[str, Any]) -> None:
                if env_id in tasks:
                    wins[env_id].append(bool(record["success"]))
                    bar.update(tasks[env_id], advance=1, success=sum(wins[env_id]) / len(wins[env_id]))

            return await evaluate(backend, settings, progress)
    finally:
        await backend.aclose()


def cmd_view(args: argparse.Namespace, out: TextIO) -> int:
    """Print the selected episodes of a trace."""
    from gem_core.eval.report import print_episode
    from gem_core.eval.traces import image_folder, read_trace

    if not os.path.exists(args.trace):
        raise ConfigError(f"no trace file {args.trace!r}")
    records = read_trace(args.trace)
    selected = [
        (i, r)
        for i, r in enumerate(records)
        if (args.env is None or r["env_id"] == args.env)
        and (args.seed is None or r["seed"] == args.seed)
        and (args.index is None or i == args.index)
        and (not args.errors or r.get("error"))
    ]
    if not selected:
        sys.stderr.write(f"gem view: no episode in {args.trace} matches\n")
        return 1
    folder = image_folder(args.trace)
    for _, record in selected:
        print_episode(record, out, image_folder=folder if os.path.isdir(folder) else None)
    return 0
