"""Dataset rows for RL2's ``train_data.path`` / ``test_data.path``: one row per (env id, seed).

RL2's ``RLDataset`` passes a row's ``extra_info`` to the env module's ``reset`` when the
row has no ``prompt``/``messages`` column; these rows have only ``extra_info``: the env
id, the seed, and JSON-encoded constructor kwargs, wrappers and reset options (JSON, so
every row has the same Parquet schema whatever the kwargs are).

Command line::

    gem-rl2-dataset --env-id core:NumberGuess-v0 --first-seed 0 --count 1024 --out data/train.parquet
    gem-rl2-dataset --env-id core:NumberGuess-v0 --first-seed 100000 --count 64 --out data/test.parquet
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping, Sequence
from itertools import product
from typing import Any

import gem_core
from gem_core.errors import ConfigError

__all__ = ["main", "make_rows", "write_parquet"]


def _not_json(value: Any) -> Any:
    raise ConfigError(
        f"{value!r} ({type(value).__name__}) is not JSON-serialisable; row fields are stored as JSON text"
    )


def _json(value: Any) -> str:
    # Empty stays "" so rows without kwargs read back as "none given".
    return json.dumps(value, sort_keys=True, default=_not_json) if value else ""


def make_rows(
    env_ids: str | Sequence[str],
    seeds: Iterable[int],
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    wrappers: Sequence[Any] | None = None,
    options: Mapping[str, Any] | None = None,
    system_prompt: str | None = None,
) -> list[dict[str, Any]]:
    """One row per (env id, seed), env-major, each ``{"extra_info": {...}}``.

    Raises:
        gem_core.errors.EnvNotFound: An env id is not registered (checked here, not mid-training).
        ConfigError: No env ids or seeds, or kwargs that are not JSON.
    """
    ids = [env_ids] if isinstance(env_ids, str) else list(env_ids)
    for env_id in ids:
        gem_core.spec(env_id)
    shared = {
        "env_kwargs": _json(dict(env_kwargs or {})),
        "wrappers": _json(list(wrappers or [])),
        "options": _json(dict(options or {})),
        "system_prompt": system_prompt or "",
    }
    rows = [
        {"extra_info": {"env_id": env_id, "seed": int(seed), **shared}} for env_id, seed in product(ids, list(seeds))
    ]
    if not rows:
        raise ConfigError(f"no rows: make_rows needs at least one env id and one seed (env ids: {ids})")
    return rows


def write_parquet(rows: Sequence[Mapping[str, Any]], path: str) -> None:
    """Write rows to a Parquet file RL2's ``load_dataset`` reads (``.parquet``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not str(path).endswith(".parquet"):
        raise ConfigError(f"RL2 picks the reader by extension: name the file *.parquet, got {path!r}")
    pq.write_table(pa.Table.from_pylist([dict(r) for r in rows]), path)


def main(argv: Sequence[str] | None = None) -> None:
    """``gem-rl2-dataset``: write the rows of one or more env ids for a range of seeds."""
    parser = argparse.ArgumentParser(prog="gem-rl2-dataset", description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", action="append", required=True, help="registered env id (repeatable)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--count", type=int, required=True, help="seeds per env id: first-seed .. first-seed+count-1")
    parser.add_argument("--env-kwargs", default="{}", help="JSON object of constructor overrides")
    parser.add_argument("--wrappers", default="[]", help='JSON list, e.g. \'[["tools", {"tools": ["python"]}]]\'')
    parser.add_argument("--options", default="{}", help="JSON object of reset options")
    parser.add_argument("--system-prompt", default=None)
    parser.add_argument("--out", required=True, help="output file, *.parquet")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")
    try:
        loaded = {name: json.loads(getattr(args, name)) for name in ("env_kwargs", "wrappers", "options")}
    except json.JSONDecodeError as exc:
        parser.error(f"--env-kwargs/--wrappers/--options must be JSON: {exc}")
    rows = make_rows(
        args.env_id,
        range(args.first_seed, args.first_seed + args.count),
        env_kwargs=loaded["env_kwargs"],
        wrappers=loaded["wrappers"],
        options=loaded["options"],
        system_prompt=args.system_prompt,
    )
    write_parquet(rows, args.out)
    print(f"wrote {len(rows)} rows to {args.out}")
