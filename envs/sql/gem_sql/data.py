"""Questions and their databases: the bundled set, and Spider/BIRD-format data already on disk.

The bundled databases ship as SQL text (``databases/<name>.sql``, written by
:mod:`gem_sql.build_databases`); the first use turns each into a read-only ``.sqlite`` file in a
cache directory (``$GEM_SQL_CACHE``, else ``$XDG_CACHE_HOME/gem/sql``, else ``~/.cache/gem/sql``),
named by a hash of its text, so a changed database never reuses an old file. Building goes to a
temporary file that is renamed into place: processes racing on the first use all end up with the
same complete file.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import tempfile
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gem_core.errors import ConfigError

__all__ = [
    "BUNDLED_DATABASES",
    "Question",
    "bundled_database",
    "bundled_questions",
    "cache_dir",
    "load_bird",
    "load_spider",
]

_PACKAGE = Path(__file__).parent
#: Names of the bundled databases.
BUNDLED_DATABASES = ("shop", "school", "flights", "library", "hr")
_BUILD_LOCK = threading.Lock()


@dataclass(frozen=True)
class Question:
    """One task: a question about a database and the gold query that answers it.

    Attributes:
        id: Stable identifier (``shop-3``, ``spider-dev-17``).
        db_id: The database's name.
        db_path: The ``.sqlite`` file.
        question: The question, in words.
        query: The gold SQL query.
        evidence: Extra knowledge for the question (BIRD's ``evidence``), or ``""``.
        difficulty: A label from the data set (``easy``, ``moderate``...), or ``""``.
    """

    id: str
    db_id: str
    db_path: Path
    question: str
    query: str
    evidence: str = ""
    difficulty: str = ""


def cache_dir() -> Path:
    """Where the bundled databases are built (see the module docstring)."""
    if os.environ.get("GEM_SQL_CACHE"):
        return Path(os.environ["GEM_SQL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gem" / "sql"


def bundled_database(name: str) -> Path:
    """The ``.sqlite`` file of bundled database ``name``, built on first use.

    Raises:
        ConfigError: no bundled database has that name, or the cache folder cannot hold it (not
            writable, full, not a folder); the message names the folder.
    """
    if name not in BUNDLED_DATABASES:
        raise ConfigError(f"no bundled database {name!r}; the bundled ones are {', '.join(BUNDLED_DATABASES)}")
    text = (_PACKAGE / "databases" / f"{name}.sql").read_text(encoding="utf-8")
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    target = cache_dir() / f"{name}-{digest}.sqlite"
    if _intact(target):
        return target
    with _BUILD_LOCK:
        if _intact(target):
            return target
        try:
            _build(text, target)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(
                f"cannot build the bundled database {name!r} in {target.parent} ({type(exc).__name__}: {exc}); "
                "point GEM_SQL_CACHE at a writable folder with a few MB free"
            ) from exc
    return target


def _intact(path: Path) -> bool:
    """Whether ``path`` is a whole SQLite file: its header's page size times page count is its size.

    A cached file cut short or scribbled over (a full disk, another tool) is then built again
    instead of failing every episode on it.
    """
    try:
        with path.open("rb") as file:
            header = file.read(100)
            size = os.fstat(file.fileno()).st_size
    except OSError:
        return False
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        return False
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    return page_size * int.from_bytes(header[28:32], "big") == size


def _build(text: str, target: Path) -> None:
    """Run ``text`` into a temporary file beside ``target``, then rename it into place (atomic)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}-", suffix=".sqlite", dir=target.parent)
    os.close(fd)
    try:
        conn = sqlite3.connect(tmp)
        try:
            conn.executescript(text)
        finally:
            conn.close()
        os.chmod(tmp, 0o444)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{number}: not JSON ({exc.msg})") from None
    return rows


def bundled_questions(databases: Sequence[str] | None = None) -> list[Question]:
    """The shipped questions, optionally only those on ``databases``.

    Raises:
        ConfigError: a name in ``databases`` is not a bundled database.
    """
    wanted = tuple(databases) if databases else BUNDLED_DATABASES
    unknown = sorted(set(wanted) - set(BUNDLED_DATABASES))
    if unknown:
        raise ConfigError(f"no bundled database {unknown}; the bundled ones are {', '.join(BUNDLED_DATABASES)}")
    rows = _checked_question_rows(_PACKAGE / "questions.jsonl")
    paths = {name: bundled_database(name) for name in wanted}
    return [
        Question(
            id=row["id"],
            db_id=row["db_id"],
            db_path=paths[row["db_id"]],
            question=row["question"],
            query=row["query"],
            difficulty=row.get("difficulty", ""),
        )
        for row in rows
        if row["db_id"] in paths
    ]


def _checked_question_rows(path: Path) -> list[dict[str, Any]]:
    """The lines of a bundled questions file, each checked (a line with a typo must not vanish silently).

    Raises:
        ConfigError: a line is not an object with text ``id``, ``db_id`` (a bundled database),
            ``question`` and ``query``, or repeats an ``id``; the message names the line.
    """
    rows = _read_jsonl(path)
    seen: set[str] = set()
    for number, row in enumerate(rows, 1):
        where = f"{path} question {number}"
        if not isinstance(row, dict):
            raise ConfigError(f"{where}: expected a JSON object")
        bad = [key for key in ("id", "db_id", "question", "query") if not isinstance(row.get(key), str)]
        if bad or not isinstance(row.get("difficulty", ""), str):
            raise ConfigError(f"{where}: these fields must be text: {', '.join(bad) or 'difficulty'}")
        if row["db_id"] not in BUNDLED_DATABASES:
            raise ConfigError(
                f"{where}: db_id {row['db_id']!r} is not a bundled database ({', '.join(BUNDLED_DATABASES)})"
            )
        if row["id"] in seen:
            raise ConfigError(f"{where}: id {row['id']!r} appears twice")
        seen.add(row["id"])
    return rows


def _load_json_list(path: Path, what: str) -> list[dict[str, Any]]:
    if not path.is_file():
        raise ConfigError(f"{what}: no file {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, list) or not all(isinstance(row, dict) for row in data):
        raise ConfigError(f"{path}: expected a JSON list of objects")
    return data


def _load_benchmark(
    root: str | Path,
    *,
    split: str,
    db_dir: str,
    sql_key: str,
    prefix: str,
    tables: str | None,
    db_ids: Iterable[str] | None,
) -> list[Question]:
    base = Path(root).expanduser()
    if not base.is_dir():
        raise ConfigError(f"{prefix} data: {base} is not a directory")
    split_path = base / split
    rows = _load_json_list(split_path, f"{prefix} questions (split=)")
    known: set[str] | None = None
    if tables is not None and (base / tables).is_file():
        known = {str(t.get("db_id")) for t in _load_json_list(base / tables, f"{prefix} schemas")}
    wanted = set(db_ids) if db_ids else None
    questions = []
    for index, row in enumerate(rows):
        where = f"{split_path} item {index}"
        missing = [key for key in ("db_id", "question", sql_key) if not isinstance(row.get(key), str)]
        if missing:
            raise ConfigError(f"{where}: no text field {', '.join(repr(k) for k in missing)}")
        db_id = row["db_id"]
        if wanted is not None and db_id not in wanted:
            continue
        if known is not None and db_id not in known:
            raise ConfigError(f"{where}: db_id {db_id!r} is not in {base / str(tables)}")
        db_path = base / db_dir / db_id / f"{db_id}.sqlite"
        if not db_path.is_file():
            raise ConfigError(f"{where}: no database file {db_path} (expected <db_dir>/<db_id>/<db_id>.sqlite)")
        questions.append(
            Question(
                id=f"{prefix}-{split_path.stem}-{index}",
                db_id=db_id,
                db_path=db_path,
                question=row["question"],
                query=row[sql_key],
                evidence=str(row.get("evidence") or ""),
                difficulty=str(row.get("difficulty") or row.get("hardness") or ""),
            )
        )
    if not questions:
        raise ConfigError(f"{split_path}: no questions" + (f" on databases {sorted(wanted)}" if wanted else ""))
    return questions


def load_spider(
    root: str | Path, *, split: str = "dev.json", db_dir: str = "database", db_ids: Iterable[str] | None = None
) -> list[Question]:
    """Questions in Spider's layout: ``tables.json``, ``<split>`` and ``<db_dir>/<db_id>/<db_id>.sqlite``.

    Args:
        root: The directory of the Spider release.
        split: The questions file (``dev.json``, ``train_spider.json``...), items with ``db_id``,
            ``question`` and ``query``.
        db_dir: The folder of the databases.
        db_ids: Keep only questions on these databases.

    Raises:
        ConfigError: a file is missing or malformed; the message names it (and the item).
    """
    return _load_benchmark(
        root, split=split, db_dir=db_dir, sql_key="query", prefix="spider", tables="tables.json", db_ids=db_ids
    )


def load_bird(
    root: str | Path, *, split: str = "dev.json", db_dir: str = "dev_databases", db_ids: Iterable[str] | None = None
) -> list[Question]:
    """Questions in BIRD's layout: ``<split>`` and ``<db_dir>/<db_id>/<db_id>.sqlite``.

    The items of ``<split>`` hold ``db_id``, ``question``, ``evidence``, ``SQL`` and ``difficulty``;
    ``dev_tables.json`` (``<split>`` with ``_tables``) is read when present.

    Raises:
        ConfigError: a file is missing or malformed; the message names it (and the item).
    """
    tables = split.replace(".json", "_tables.json")
    return _load_benchmark(root, split=split, db_dir=db_dir, sql_key="SQL", prefix="bird", tables=tables, db_ids=db_ids)
