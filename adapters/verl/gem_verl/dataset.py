"""Parquet rows for verl's trainer: one row per (env id, seed), played by ``gem_env_agent``.

verl's ``RLHFDataset`` needs a ``prompt`` column (chat messages) and passes every
column to the agent loop. The loop ignores ``prompt`` (the env writes the first
observation); it is a short readable label, so verl's prompt-length filter and logs
have something sensible. What the loop reads is ``extra_info["gem"]``.

Command line::

    gem-verl-dataset --env-id core:NumberGuess-v0 --seeds 0-999 --out ~/data/gem/train.parquet
    gem-verl-dataset --env-id core:NumberGuess-v0 --seeds 1000-1063 --out ~/data/gem/val.parquet
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import gem_core
from gem_core.cli_values import parse_json_object, parse_seeds
from gem_core.errors import ConfigError
from gem_verl.plugin import AGENT_NAME  # the plugin module imports no verl

__all__ = ["main", "make_rows", "parse_seeds", "write_parquet"]


def _json_or_empty(value: Mapping[str, Any] | None, name: str) -> str:
    if not value:
        return ""
    try:
        return json.dumps(dict(value), sort_keys=True)
    except TypeError as exc:
        raise ConfigError(f"{name} must be JSON-serialisable (it is stored in Parquet): {exc}") from None


def make_rows(
    env_ids: str | Sequence[str],
    seeds: Iterable[int],
    *,
    options: Mapping[str, Any] | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    system_prompt: str | None = None,
    start_index: int = 0,
) -> list[dict[str, Any]]:
    """Build one row per (env id, seed), env-major.

    Args:
        env_ids: One or more registered env ids; each is checked against the registry.
        seeds: ``reset`` seeds; every env id gets each of them.
        options: ``reset`` options for every row.
        env_kwargs: Env constructor overrides for every row.
        system_prompt: A system message before the first observation.
        start_index: ``extra_info["index"]`` of the first row (verl groups logs by it).

    Returns:
        Rows with ``data_source`` (the env id), ``agent_name``, ``prompt``,
        ``reward_model`` and ``extra_info`` (``index`` and ``gem``).

    Raises:
        gem_core.errors.EnvNotFound: An env id is not registered.
        ConfigError: No env ids or seeds, or options that are not JSON.
    """
    ids = [env_ids] if isinstance(env_ids, str) else list(env_ids)
    seed_list = [int(s) for s in seeds]
    if not ids or not seed_list:
        raise ConfigError("make_rows needs at least one env id and one seed")
    for env_id in ids:
        gem_core.spec(env_id)  # unknown ids fail here, with suggestions, not inside a Ray worker
    options_json = _json_or_empty(options, "options")
    env_kwargs_json = _json_or_empty(env_kwargs, "env_kwargs")
    rows: list[dict[str, Any]] = []
    for env_id in ids:
        for seed in seed_list:
            rows.append(
                {
                    "data_source": env_id,
                    "agent_name": AGENT_NAME,
                    "prompt": [{"role": "user", "content": f"{env_id} seed={seed}"}],
                    "reward_model": {"style": "gem_env", "ground_truth": ""},
                    "extra_info": {
                        "index": start_index + len(rows),
                        "gem": {
                            "env_id": env_id,
                            "seed": seed,
                            "options": options_json,
                            "env_kwargs": env_kwargs_json,
                            "system_prompt": system_prompt or "",
                        },
                    },
                }
            )
    return rows


def write_parquet(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str]) -> str:
    """Write rows (from :func:`make_rows`) to a Parquet file; parent folders are created.

    Returns:
        The path written, with ``~`` expanded.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise ConfigError("no rows to write")
    target = os.path.expanduser(os.fspath(path))
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    pq.write_table(pa.Table.from_pylist([dict(r) for r in rows]), target)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    """``gem-verl-dataset``: write a Parquet file of env episodes for verl."""
    parser = argparse.ArgumentParser(prog="gem-verl-dataset", description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", action="append", required=True, help="registered env id (repeatable)")
    parser.add_argument("--seeds", required=True, help="seeds, e.g. 0-999 or 1,2,3")
    parser.add_argument("--out", required=True, help="Parquet file to write")
    parser.add_argument("--options", default=None, help="reset options as JSON")
    parser.add_argument("--env-kwargs", default=None, help="env constructor overrides as JSON")
    parser.add_argument("--system-prompt", default=None)
    parser.add_argument("--start-index", type=int, default=0)
    args = parser.parse_args(argv)

    rows = make_rows(
        args.env_id,
        parse_seeds(args.seeds),
        options=parse_json_object(args.options, "--options"),
        env_kwargs=parse_json_object(args.env_kwargs, "--env-kwargs"),
        system_prompt=args.system_prompt,
        start_index=args.start_index,
    )
    print(f"wrote {len(rows)} rows to {write_parquet(rows, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
