"""Eval traces: one JSON line per finished episode, written as it finishes, read back for resume and ``gem view``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import IO, Any

from gem_core.errors import TrajectoryError

__all__ = ["TRACE_SCHEMA", "TraceWriter", "episode_key", "finished_keys", "read_trace"]

#: Schema tag of every trace line.
TRACE_SCHEMA = "gem.eval/1"


def episode_key(env_id: str, seed: int) -> tuple[str, int]:
    """What identifies an episode across runs of ``gem eval`` (resume skips finished keys)."""
    return (env_id, int(seed))


def read_trace(path: str | os.PathLike[str], *, repair: bool = False) -> list[dict[str, Any]]:
    """Read every record of a trace file.

    A process killed while writing leaves at most one partial last line; it is skipped
    (and cut off the file when ``repair`` is set, so appending starts on a clean line).

    Raises:
        TrajectoryError: A line other than the last is not a trace record.
    """
    if not os.path.exists(path):
        return []
    records: list[dict[str, Any]] = []
    good_end = 0
    with open(path, "rb") as handle:
        lines = handle.readlines()
    offset = 0
    for number, raw in enumerate(lines, start=1):
        offset += len(raw)
        if not raw.strip():
            good_end = offset
            continue
        try:
            record = json.loads(raw)
            if not isinstance(record, dict) or record.get("schema") != TRACE_SCHEMA:
                raise ValueError(f"not a {TRACE_SCHEMA} record")
        except ValueError as exc:
            if number == len(lines) and not raw.endswith(b"\n"):
                break  # the partial line of a killed run
            raise TrajectoryError(f"{os.fspath(path)}:{number}: {exc}") from None
        records.append(record)
        good_end = offset
    if repair and good_end < offset:
        with open(path, "r+b") as handle:
            handle.truncate(good_end)
    return records


def finished_keys(records: list[dict[str, Any]]) -> set[tuple[str, int]]:
    """Keys of the episodes a trace already holds."""
    return {episode_key(r["env_id"], r["seed"]) for r in records}


@dataclass
class TraceWriter:
    """Appends records to a trace file, flushing each one so a crash loses nothing finished."""

    path: str
    _handle: IO[str] | None = None

    def __enter__(self) -> TraceWriter:
        self._handle = open(self.path, "a", encoding="utf-8")
        return self

    def write(self, record: dict[str, Any]) -> None:
        assert self._handle is not None, "use TraceWriter as a context manager"
        self._handle.write(json.dumps({"schema": TRACE_SCHEMA, **record}, ensure_ascii=False, default=_plain) + "\n")
        self._handle.flush()

    def __exit__(self, *exc: object) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _plain(value: Any) -> Any:
    item = getattr(value, "item", None)  # numpy scalars in info dicts
    if callable(item):
        return item()
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    return str(value)
