"""Dataset loading shared by the dataset envs (math, QA, code): once per process, typed errors offline.

A source is a Hugging Face dataset id (``axon-rl/GSM-8k``), a local JSONL/JSON/Parquet/CSV
file, or a local directory that ``datasets.load_dataset`` understands. Loaded splits are
cached per process, so a thousand env instances share one copy of the rows.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from gem_core.errors import ConfigError
from gem_dataset_env.errors import DatasetUnavailable

__all__ = ["clear_cache", "load_split"]

_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
_CACHE: dict[tuple[Any, ...], Any] = {}
_LOCKS: dict[tuple[Any, ...], threading.Lock] = {}
_CACHE_LOCK = threading.Lock()


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~")) or Path(path).suffix in _BUILDERS or os.sep in path[:1]


def _hub_help(path: str, split: str, name: str | None, env_id: str | None) -> str:
    make_id = env_id or "<env id>"
    config = f", {name!r}" if name else ""
    return (
        f"To use a local copy, export it where the hub is reachable:\n"
        f"    datasets.load_dataset({path!r}{config}, split={split!r}).to_parquet('data.parquet')\n"
        f"then point the env at the file (JSONL and Parquet work; the column names must match):\n"
        f"    gem_core.make({make_id!r}, path='/abs/path/data.parquet')\n"
        f"or at your own files with a builder: gem_core.make({make_id!r}, path='json', data_files='/abs/path/*.jsonl')"
    )


def load_split(
    path: str,
    *,
    split: str = "train",
    name: str | None = None,
    data_files: str | list[str] | None = None,
    env_id: str | None = None,
) -> Any:
    """Load one split as a ``datasets.Dataset``, once per process.

    Args:
        path: Hub dataset id, local file, local directory, or a builder name (``"json"``) with ``data_files``.
        split: Split to load. Local single files have only ``"train"``, so any split name maps to it.
        name: Dataset configuration (subset) on the hub.
        data_files: Files for a builder ``path``.
        env_id: The env id, to show in error messages.

    Raises:
        DatasetUnavailable: the hub could not be reached or the dataset is missing; the message
            shows how to load a local copy instead.
        ConfigError: a local file does not exist or has an unknown extension.
    """
    local_file = Path(path).expanduser()
    files: Any = data_files
    builder = path
    if local_file.is_file():
        builder = _BUILDERS.get(local_file.suffix, "")
        if not builder:
            raise ConfigError(f"path {path!r}: unknown file type {local_file.suffix!r}; use one of {sorted(_BUILDERS)}")
        files, split = str(local_file.resolve()), "train"
    elif data_files is None and _looks_local(path) and not local_file.exists():
        raise ConfigError(f"path {path!r}: no such file or directory")
    key = (builder, name, split, str(files))
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
        lock = _LOCKS.setdefault(key, threading.Lock())
    with lock:  # one loader per key; others wait and then reuse its result
        if key in _CACHE:
            return _CACHE[key]
        dataset = _load(builder, name=name, split=split, data_files=files, env_id=env_id, shown=path)
        with _CACHE_LOCK:
            _CACHE[key] = dataset
        return dataset


def _load(builder: str, *, name: str | None, split: str, data_files: Any, env_id: str | None, shown: str) -> Any:
    import datasets

    try:
        return datasets.load_dataset(builder, name, split=split, data_files=data_files)
    except Exception as exc:
        if Path(builder).exists() or builder in set(_BUILDERS.values()):
            raise DatasetUnavailable(f"cannot load dataset {shown!r} (split {split!r}): {exc}") from exc
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
        reason = (
            "HF_HUB_OFFLINE is set, so the Hugging Face hub is not contacted"
            if offline
            else "the Hugging Face hub could not be reached or has no such dataset"
        )
        raise DatasetUnavailable(
            f"cannot load {shown!r} (split {split!r}) for {env_id or 'this env'}: {reason} "
            f"({type(exc).__name__}: {str(exc)[:300]}).\n{_hub_help(shown, split, name, env_id)}"
        ) from exc


def clear_cache() -> None:
    """Forget every loaded split (tests, or to free memory)."""
    with _CACHE_LOCK:
        _CACHE.clear()
        _LOCKS.clear()
