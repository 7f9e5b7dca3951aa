"""Eval traces: one JSON line per finished episode, written as it finishes, read back for resume and ``gem view``.

Images (observations with :class:`~gem_core.multimodal.Image` parts) are not inlined: each is
written once, by content hash, to the folder beside the trace (:func:`image_folder`, e.g.
``run.jsonl.images/<sha256>.png``), and the record holds ``{"$image": {"format", "sha256"}}``
in its place. :func:`load_images` turns those references back into images.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from gem_core.errors import ImageError, TrajectoryError
from gem_core.multimodal import IMAGE_FORMATS, Image, has_images, images_from_json, images_to_json

__all__ = [
    "RECORD_FIELDS",
    "TRACE_SCHEMA",
    "TraceWriter",
    "episode_key",
    "finished_keys",
    "image_folder",
    "load_images",
    "read_trace",
    "record_problem",
]

#: Schema tag of every trace line.
TRACE_SCHEMA = "gem.eval/1"


def episode_key(env_id: str, seed: int) -> tuple[str, int]:
    """What identifies an episode across runs of ``gem eval`` (resume skips finished keys)."""
    return (env_id, int(seed))


#: What every trace record holds, and its types: what resume, the summary and ``gem view`` read.
RECORD_FIELDS: dict[str, tuple[type, ...]] = {
    "env_id": (str,),
    "seed": (int,),
    "episode_return": (int, float),
    "success": (bool,),
    "num_turns": (int,),
    "completion_tokens": (int, float),
}


def record_problem(record: Any) -> str | None:
    """What makes ``record`` no trace record (``None``: it is one)."""
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not a {TRACE_SCHEMA} record (an object)"
    if record.get("schema") != TRACE_SCHEMA:
        return f"schema is {record.get('schema')!r}, not {TRACE_SCHEMA!r}"
    for name, types in RECORD_FIELDS.items():
        if name not in record:
            return f"the record has no {name!r}"
        value = record[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            return f"{name} is {value!r}, not {' or '.join(t.__name__ for t in types)}"
    return None


def read_trace(path: str | os.PathLike[str], *, repair: bool = False) -> list[dict[str, Any]]:
    """Read and check every record of a trace file.

    Every line must be a whole :data:`TRACE_SCHEMA` record with the :data:`RECORD_FIELDS`,
    and each ``(env_id, seed)`` may appear once. The only tolerated damage is what a kill
    leaves: a last line without its newline. If it is a whole record it is kept (``repair``
    adds the newline, so an append starts on a fresh line); if not (cut mid-write) it is
    skipped (``repair`` cuts it off the file).

    Raises:
        TrajectoryError: ``file:line: what is wrong`` for any other line that is not a
            record, lacks a field, or repeats an episode.
    """
    if not os.path.exists(path):
        return []
    name = os.fspath(path)
    records: list[dict[str, Any]] = []
    first_line: dict[tuple[str, int], int] = {}
    with open(path, "rb") as handle:
        lines = handle.readlines()
    good_end = offset = 0
    add_newline = False
    for number, raw in enumerate(lines, start=1):
        offset += len(raw)
        whole = raw.endswith(b"\n")
        if not raw.strip():
            good_end = offset
            continue
        try:
            record = json.loads(raw)
        except ValueError as exc:  # UnicodeDecodeError included: a cut inside a multi-byte character
            if not whole:
                break  # the partial last line of a killed run
            raise TrajectoryError(f"{name}:{number}: not JSON ({exc})") from None
        problem = record_problem(record)
        if problem is not None:
            raise TrajectoryError(f"{name}:{number}: {problem}; every line of a trace is one gem eval record")
        key = episode_key(record["env_id"], record["seed"])
        if key in first_line:
            raise TrajectoryError(
                f"{name}:{number}: {key[0]} seed={key[1]} is already at line {first_line[key]}; a trace holds "
                "each episode once (resume a trace with --resume, never by running into it again)"
            )
        first_line[key] = number
        records.append(record)
        good_end = offset
        add_newline = not whole
    if repair and good_end < offset:
        with open(path, "r+b") as handle:
            handle.truncate(good_end)
    if repair and add_newline:
        with open(path, "ab") as handle:
            handle.write(b"\n")
    return records


def image_folder(trace_path: str | os.PathLike[str]) -> str:
    """The folder that holds a trace's images: the trace's path with ``.images`` added."""
    return f"{os.fspath(trace_path)}.images"


def load_images(record: Any, trace_path: str | os.PathLike[str]) -> Any:
    """``record`` with its image references (``{"$image": {"format", "sha256"}}``) as :class:`Image` objects.

    Each image is a path image of the trace's image folder, checked against its hash.

    Raises:
        ImageError: A referenced image is missing from the folder, or its bytes do not match its hash.
    """
    folder = image_folder(trace_path)

    def load(ref: dict[str, Any]) -> Image:
        digest, fmt = str(ref.get("sha256", "")), str(ref.get("format", ""))
        if fmt not in IMAGE_FORMATS or len(digest) != 64:
            raise ImageError(f"{trace_path}: a bad image reference {ref!r} (needs format and sha256)")
        image = Image.from_path(os.path.join(folder, f"{digest}.{fmt}"))
        if image.sha256 != digest:
            raise ImageError(f"{image.path}: its bytes do not match its name (the trace's image folder was changed)")
        return image

    return images_from_json(record, load)


def finished_keys(records: list[dict[str, Any]]) -> set[tuple[str, int]]:
    """Keys of the episodes a trace already holds."""
    return {episode_key(r["env_id"], r["seed"]) for r in records}


@dataclass
class TraceWriter:
    """Appends records to a trace file as whole lines, each with one ``write``, so a crash loses nothing finished.

    Opening it repairs the file's end first (:func:`read_trace` with ``repair``): a
    complete last record gets its missing newline, a partial one is cut off, so the
    first record appended starts on a line of its own.
    """

    path: str
    _fd: int | None = None
    _stored: set[str] = field(default_factory=set)

    def __enter__(self) -> TraceWriter:
        if os.path.exists(self.path) and os.path.getsize(self.path) > 0:
            read_trace(self.path, repair=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self

    def write(self, record: dict[str, Any]) -> None:
        assert self._fd is not None, "use TraceWriter as a context manager"
        if has_images(record):
            record = images_to_json(record, self._store_image)
        line = json.dumps({"schema": TRACE_SCHEMA, **record}, ensure_ascii=False, default=_plain) + "\n"
        view = memoryview(line.encode("utf-8"))
        while view:  # os.write may write less than asked (signals, full disks); O_APPEND keeps the pieces together
            view = view[os.write(self._fd, view) :]

    def _store_image(self, image: Image) -> dict[str, Any]:
        """Write ``image`` to the trace's image folder unless it is there; return its reference."""
        digest = image.sha256
        if digest not in self._stored:
            folder = image_folder(self.path)
            os.makedirs(folder, exist_ok=True)
            target = os.path.join(folder, f"{digest}.{image.format}")
            if not os.path.exists(target):  # by hash: the same picture in many episodes is stored once
                partial = f"{target}.{os.getpid()}.part"
                with open(partial, "wb") as handle:
                    handle.write(image.read())
                os.replace(partial, target)  # whole or absent, even if the run is killed mid-write
            self._stored.add(digest)
        return {"format": image.format, "sha256": digest}

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _plain(value: Any) -> Any:
    item = getattr(value, "item", None)  # numpy scalars in info dicts
    if callable(item):
        return item()
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    return str(value)
