"""A read-only SQLite connection for model-written queries, with a time, row and size limit on each.

Layers, each enough on its own for the writes it covers:

1. The file is opened through a URI with ``mode=ro`` (and ``immutable=1`` for files nobody changes
   while episodes run: no locks, no journal, no ``-wal`` file), so SQLite refuses to write it.
2. An authorizer allows only reading: ``SELECT``, reading columns, function calls except the
   file-reaching ones (``load_extension``, ``readfile``, ``writefile``, ``fts3_tokenizer``...),
   recursive CTEs and a short list of schema-reading pragmas. ``ATTACH``, ``DETACH``, every
   ``CREATE``/``DROP``/``ALTER``/``INSERT``/``UPDATE``/``DELETE``, transactions, ``ANALYZE``,
   ``REINDEX``, virtual tables and pragma writes are denied when the statement is prepared.
3. Only statements that start with ``SELECT``, ``WITH``, ``VALUES``, ``EXPLAIN`` or ``PRAGMA`` are
   prepared at all (``VACUUM INTO`` can write a new file from a read-only database; the authorizer
   denies it too, this layer does not depend on the SQLite version doing so), one statement per call.
4. Connection limits: no attached databases, strings and blobs of at most ``max_value_bytes``,
   SQL text of at most ``max_sql_chars``, LIKE/GLOB patterns of at most 200 characters;
   ``query_only``; an 8 MB page cache (big sorts spill to SQLite's unlinked temp files).
5. Functions whose one call can outlast the deadline are replaced (:class:`_GuardedFunctions`):
   ``printf``/``format`` with a width or precision over :data:`MAX_PRINTF_WIDTH` are refused (3.40:
   ``printf('%.*c', 2e9, 'x')`` runs for a minute); ``instr``, ``replace`` and ``trim(X, Y)`` search
   in linear time (SQLite's own search a 1 MB string for minutes). The progress handler that
   enforces the deadline runs between SQLite instructions, never inside one function call.

Every query runs under a deadline (a progress handler interrupts it) and returns at most
``max_rows`` rows; any failure becomes :attr:`QueryResult.error`, a message for the model.
"""

from __future__ import annotations

import functools
import math
import os
import re
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = [
    "DENIED_FUNCTIONS",
    "MAX_PRINTF_WIDTH",
    "READ_PRAGMAS",
    "Database",
    "QueryLimits",
    "QueryResult",
    "format_result",
]

#: Pragmas that only read the schema; any other pragma is denied.
READ_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list", "table_list"}
)
#: Functions that reach the file system or the process, whatever the build has compiled in.
DENIED_FUNCTIONS = frozenset(
    {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "fsdir", "lsmode", "sqlar_compress"}
)
_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})
_FIRST_WORD = re.compile(r"\s*([A-Za-z]+)")
_COMMENTS = re.compile(r"\s*(?:--[^\n]*(?:\n|$)|/\*.*?(?:\*/|$))", re.DOTALL)
_READ_STATEMENTS = frozenset({"select", "with", "values", "explain", "pragma"})
#: Largest width or precision ``printf``/``format`` accept (legitimate formats use a handful).
MAX_PRINTF_WIDTH = 1000
_PRINTF_SPEC = re.compile(r"%([-+ #0,!]*)(\*|\d+)?(?:\.(\*|\d*))?(?:ll|l|h)?(.)", re.DOTALL)
#: Page cache of a connection, in KiB; what a sort holds in memory before it spills to a temp file.
_CACHE_KIB = 8000
#: Largest ``len(haystack) * len(needle)`` handed to SQLite's naive search (about 10 ms of work).
_NAIVE_SEARCH_CELLS = 100_000_000
#: Seconds between two looks at the size of SQLite's temporary files during a query.
_SCRATCH_CHECK_S = 0.05
#: How often (in SQLite virtual-machine instructions) the deadline is checked: every few rows even when
#: each row builds 1 MB values (at 2,000, ``randomblob(999000)`` per row ran 6 s past a 1 s limit).
_PROGRESS_EVERY = 100


@dataclass(frozen=True)
class QueryLimits:
    """Limits on one query.

    Attributes:
        timeout_s: Wall-clock seconds before the query is interrupted.
        max_rows: Rows fetched; a result with more is cut there and marked truncated.
        max_value_bytes: Largest string or blob any expression may build (SQLite's length limit).
        max_sql_chars: Longest query text accepted.
        max_scratch_bytes: Most bytes of SQLite temporary files (sorts, ``DISTINCT``, materialized
            subqueries) that the whole process may hold while the query runs; past it the query
            is stopped. Checked on Linux (``/proc/self/fd``), every 50 ms.
    """

    timeout_s: float = 2.0
    max_rows: int = 50
    max_value_bytes: int = 1_000_000
    max_sql_chars: int = 20_000
    max_scratch_bytes: int = 2_000_000_000


@dataclass
class QueryResult:
    """What one query produced.

    Attributes:
        columns: Column names, in order.
        rows: The rows fetched (at most ``max_rows``).
        truncated: The query had more rows than were fetched.
        error: A message for the model when the query failed or was refused; ``None`` on success.
        elapsed_s: Wall-clock seconds spent.
    """

    columns: list[str] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    truncated: bool = False
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the query ran to completion (possibly truncated)."""
        return self.error is None


def _statement_kind(sql: str) -> str:
    """The first keyword of ``sql`` after comments and whitespace, lower-cased ('' if none)."""
    pos = 0
    while True:
        match = _COMMENTS.match(sql, pos)
        if match is None or match.end() == pos:
            break
        pos = match.end()
    word = _FIRST_WORD.match(sql, pos)
    return word.group(1).lower() if word else ""


def _authorize(action: int, arg1: str | None, arg2: str | None, _db: str | None, _trigger: str | None) -> int:
    if action in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if (arg2 or "").lower() in DENIED_FUNCTIONS else sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in READ_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


class _GuardedFunctions:
    """SQLite functions whose one call can outlast any deadline, replaced by ones that cannot.

    ``printf``/``format`` refuse huge widths, then format with SQLite's own ``printf``. ``instr``,
    ``replace`` and two-argument ``trim``/``ltrim``/``rtrim`` search naively inside SQLite (a 1 MB
    string searched for a 500 KB one, or trimmed by a set of 80,000 characters, takes seconds to
    minutes in one call); here text is searched in linear time by Python, with SQLite's results.
    Other argument types (numbers, blobs) go to SQLite's own function on a private in-memory
    connection when their sizes make that cheap, and are refused otherwise. A refusal raises
    ``ValueError``; its reason is kept in :attr:`refusal` for the error message.
    """

    def __init__(self, max_value_bytes: int) -> None:
        self._conn = sqlite3.connect(":memory:", check_same_thread=False)
        self._max_value_bytes = max_value_bytes
        self.refusal = ""
        if hasattr(self._conn, "setlimit"):
            self._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)

    def register(self, conn: sqlite3.Connection) -> None:
        """Install the guarded functions on ``conn`` (over SQLite's built-in ones of the same arity)."""
        for name in ("printf", "format"):
            conn.create_function(name, -1, self.printf)
        conn.create_function("instr", 2, self.instr)
        conn.create_function("replace", 3, self.replace)
        for name in ("trim", "ltrim", "rtrim"):
            conn.create_function(name, 2, functools.partial(self.trim, name))

    def _refuse(self, reason: str) -> ValueError:
        self.refusal = reason
        return ValueError(reason)

    def _sqlite(self, name: str, args: tuple[Any, ...]) -> Any:
        """SQLite's own ``name(*args)``, when the arguments are small enough for its naive search."""
        sizes = [len(a) if isinstance(a, (str, bytes)) else 32 for a in args]
        if math.prod(sorted(sizes)[-2:]) > _NAIVE_SEARCH_CELLS:
            raise self._refuse(f"{name}() of a blob this long is refused (limit: {_NAIVE_SEARCH_CELLS:,} byte pairs)")
        return self._own(name, args)

    def _own(self, name: str, args: tuple[Any, ...]) -> Any:
        """SQLite's own ``name(*args)`` on the private connection, text handed back as text."""
        call = f"{name}({', '.join('?' * len(args))})"
        self._conn.text_factory = bytes
        try:
            value, kind = self._conn.execute(f"SELECT {call}, typeof({call})", args * 2).fetchone()
        finally:
            self._conn.text_factory = str
        if kind != b"text":  # typeof() is text too, so bytes here
            return value
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:  # a blob read as text; Python cannot hand such text back to SQLite
            raise self._refuse(f"{name}() of a blob that is not UTF-8 text is refused") from None

    def printf(self, fmt: Any, *args: Any) -> Any:
        if isinstance(fmt, str):
            try:
                _check_widths(fmt, args)
            except ValueError as exc:
                raise self._refuse(str(exc)) from None
        return self._own("printf", (fmt, *args))

    def instr(self, haystack: Any, needle: Any) -> Any:
        if haystack is None or needle is None:
            return None
        if type(haystack) is type(needle) and isinstance(haystack, (str, bytes)):
            return haystack.find(needle) + 1  # characters of text, bytes of blobs, as SQLite counts
        return self._sqlite("instr", (haystack, needle))

    def replace(self, text: Any, old: Any, new: Any) -> Any:
        if text is None or old is None:
            return None
        if not all(isinstance(a, str) for a in (text, old, new)):
            return self._sqlite("replace", (text, old, new))
        if not old:
            return text  # before looking at ``new``, as SQLite: replace(x, '', NULL) is x
        size = len(text) + text.count(old) * (len(new) - len(old))
        if size > self._max_value_bytes:  # characters: a lower bound on the UTF-8 bytes SQLite would refuse
            raise self._refuse(
                f"replace() would build {size:,} characters; values are limited to {self._max_value_bytes:,} bytes"
            )
        return text.replace(old, new)

    def trim(self, name: str, text: Any, chars: Any) -> Any:
        if text is None or chars is None:
            return None
        if not (isinstance(text, str) and isinstance(chars, str)):
            return self._sqlite(name, (text, chars))
        remove = set(chars.split("\x00", 1)[0])  # SQLite reads the set up to its first NUL
        start, end = 0, len(text)
        if name != "rtrim":
            while start < end and text[start] in remove:
                start += 1
        if name != "ltrim":
            while end > start and text[end - 1] in remove:
                end -= 1
        return text[start:end]

    def close(self) -> None:
        self._conn.close()


def _check_widths(fmt: str, args: tuple[Any, ...]) -> None:
    """Raise ``ValueError`` when a conversion of ``fmt`` asks for more than :data:`MAX_PRINTF_WIDTH`."""
    position = 0
    for match in _PRINTF_SPEC.finditer(fmt):
        if match.group(4) == "%":
            continue
        for part in (match.group(2), match.group(3)):
            if part == "*":
                value = args[position] if position < len(args) else 0
                position += 1
                try:
                    size = abs(int(value))
                except (TypeError, ValueError, OverflowError):
                    size = 0
            else:
                size = int(part) if part else 0
            if size > MAX_PRINTF_WIDTH:
                raise ValueError(f"printf width or precision {size} is over the limit of {MAX_PRINTF_WIDTH}")
        position += 1


def _scratch_bytes() -> int:
    """Bytes of SQLite's temporary files (``etilqs_*``, unlinked while open) this process holds (0 off Linux)."""
    total = 0
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return 0
    for fd in fds:
        try:
            if "etilqs_" in os.readlink(f"/proc/self/fd/{fd}"):
                total += os.fstat(int(fd)).st_size
        except (OSError, ValueError):
            continue  # closed meanwhile
    return total


def _decode(raw: bytes) -> str:
    # Databases on disk (Spider's among them) hold some text that is not UTF-8; show it, do not fail.
    return raw.decode("utf-8", "replace")


class Database:
    """One read-only connection to a SQLite file; safe to share between threads (calls take turns).

    Args:
        path: The database file.
        immutable: Open with ``immutable=1``: no locking and no change detection. Right for
            data set files that nothing writes while episodes run (the bundled ones, Spider's).
        limits: Default :class:`QueryLimits` of :meth:`run`.

    Raises:
        FileNotFoundError: ``path`` is not a file.
        sqlite3.DatabaseError: the file is not a SQLite database.
    """

    def __init__(self, path: str | Path, *, immutable: bool = True, limits: QueryLimits | None = None) -> None:
        self.path = Path(path).resolve()
        if not self.path.is_file():
            raise FileNotFoundError(f"no database file at {self.path}")
        self.limits = limits or QueryLimits()
        uri = f"file:{quote(str(self.path))}?mode=ro" + ("&immutable=1" if immutable else "")
        self._lock = threading.Lock()
        self._deadline = math.inf
        self._scratch_limit = self.limits.max_scratch_bytes
        self._next_scratch_check = math.inf
        self._scratch_exceeded = False
        self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        self._functions = _GuardedFunctions(self.limits.max_value_bytes)
        try:
            self._conn.text_factory = _decode
            self._conn.execute("PRAGMA query_only = 1")
            # Big sorts, DISTINCTs and CTE queues spill past an 8 MB cache into SQLite's own unlinked temp
            # files, so a hostile query's memory stays small; how much it spills is bounded by its time limit.
            self._conn.execute("PRAGMA temp_store = FILE")
            self._conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
            self._conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # fails here on a non-database
            if hasattr(self._conn, "setlimit"):  # Python >= 3.11; the authorizer denies ATTACH either way
                self._conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
                self._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self.limits.max_value_bytes)
                self._conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, self.limits.max_sql_chars)
                self._conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 200)
            self._functions.register(self._conn)
            self._conn.set_authorizer(_authorize)
            self._conn.set_progress_handler(self._past_deadline, _PROGRESS_EVERY)
        except BaseException:
            self._conn.close()
            self._functions.close()
            raise
        self._closed = False

    def _past_deadline(self) -> int:
        now = time.monotonic()
        if now > self._deadline:
            return 1
        if now >= self._next_scratch_check:  # spilled sorts grow by disk speed: GBs in a 10 s limit
            self._next_scratch_check = now + _SCRATCH_CHECK_S
            if _scratch_bytes() > self._scratch_limit:
                self._scratch_exceeded = True
                return 1
        return 0

    def schema(self) -> str:
        """The ``CREATE TABLE`` statements of the database, one per line (a prompt's schema section)."""
        result = self.run(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid",
            QueryLimits(timeout_s=10.0, max_rows=10_000),
        )
        if result.error is not None:
            raise sqlite3.DatabaseError(f"cannot read the schema of {self.path}: {result.error}")
        return "\n".join(f"{row[0]};" for row in result.rows if row[0])

    def run(self, sql: str, limits: QueryLimits | None = None) -> QueryResult:
        """Run one read-only statement; never raises for anything ``sql`` holds.

        Args:
            sql: The query.
            limits: Overrides :attr:`limits` for this call.

        Returns:
            The rows, or an error message for the model.
        """
        limits = limits or self.limits
        start = time.monotonic()
        result = self._run(sql, limits)
        result.elapsed_s = time.monotonic() - start
        return result

    def _run(self, sql: str, limits: QueryLimits) -> QueryResult:
        if not isinstance(sql, str):
            return QueryResult(error=f"the query must be text, got {type(sql).__name__}")
        if len(sql) > limits.max_sql_chars:
            return QueryResult(error=f"the query is {len(sql)} characters long; the limit is {limits.max_sql_chars}")
        if "\x00" in sql:
            return QueryResult(error="the query contains a NUL character")
        kind = _statement_kind(sql)
        if kind not in _READ_STATEMENTS:
            shown = f"a {kind.upper()} statement" if kind else "no statement"
            return QueryResult(
                error=f"the database is read-only and this is {shown}; write one SELECT (or WITH ... SELECT) query"
            )
        with self._lock:
            if self._closed:
                return QueryResult(error="the database connection is closed")
            self._deadline = time.monotonic() + limits.timeout_s
            self._next_scratch_check = time.monotonic() + _SCRATCH_CHECK_S
            self._scratch_limit, self._scratch_exceeded = limits.max_scratch_bytes, False
            self._functions.refusal = ""
            cursor = self._conn.cursor()
            try:
                cursor.execute(sql)
                if cursor.description is None:
                    return QueryResult(error="the statement returned no result set; write a SELECT query")
                columns = [str(d[0]) for d in cursor.description]
                rows = cursor.fetchmany(limits.max_rows + 1)
                truncated = len(rows) > limits.max_rows
                return QueryResult(
                    columns=columns, rows=[tuple(r) for r in rows[: limits.max_rows]], truncated=truncated
                )
            except sqlite3.Warning as exc:  # "You can only execute one statement at a time."
                return QueryResult(error=f"{exc} Send one statement per query, without a second ';'.")
            except sqlite3.Error as exc:
                if self._scratch_exceeded:
                    return QueryResult(
                        error=f"the query's temporary files (sorting, grouping) passed {limits.max_scratch_bytes:,} "
                        "bytes and it was stopped; make it cheaper"
                    )
                return QueryResult(error=self._explain(exc, limits, self._functions.refusal))
            except (ValueError, OverflowError, UnicodeError, MemoryError, RecursionError) as exc:
                return QueryResult(error=f"the query could not run: {type(exc).__name__}: {exc}")
            finally:
                self._deadline = self._next_scratch_check = math.inf
                cursor.close()

    @staticmethod
    def _explain(exc: sqlite3.Error, limits: QueryLimits, refusal: str) -> str:
        message = str(exc)
        if message == "interrupted":
            return f"the query ran longer than {limits.timeout_s:g} s and was stopped; make it cheaper"
        if "not authorized" in message:
            return "not authorized: the database is read-only (SELECT queries only; no ATTACH, PRAGMA writes, files)"
        if "user-defined function raised exception" in message:
            return f"a function refused its arguments: {refusal or 'see the limits of printf, instr, replace and trim'}"
        if "too big" in message:
            return f"{message}: values are limited to {limits.max_value_bytes} bytes"
        return f"{type(exc).__name__}: {message}"

    def close(self) -> None:
        """Close the connection; idempotent. Later queries return an error result."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
                self._functions.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cell(value: Any, max_chars: int) -> str:
    if value is None:
        text = "NULL"
    elif isinstance(value, bytes):
        text = f"<blob {len(value)} bytes>"
    elif isinstance(value, float):
        text = repr(round(value, 6))
    else:
        text = str(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


def format_result(result: QueryResult, *, max_cell_chars: int = 60, max_chars: int = 4000) -> str:
    """``result`` as a small text table for the model (cells and the whole text capped).

    Args:
        result: A query's result.
        max_cell_chars: Longest cell shown; longer ones end in ``...``.
        max_chars: Longest text returned; rows past it are left out and counted.
    """
    if result.error is not None:
        return f"error: {result.error}"
    lines = [" | ".join(_cell(c, max_cell_chars) for c in result.columns)]
    shown = 0
    for row in result.rows:
        line = " | ".join(_cell(v, max_cell_chars) for v in row)
        if sum(len(x) + 1 for x in lines) + len(line) > max_chars:
            break
        lines.append(line)
        shown += 1
    more = len(result.rows) - shown
    if result.truncated or more:
        lines.append(f"({shown} rows shown; the query returned more)")
    else:
        lines.append(f"({shown} row{'s' if shown != 1 else ''})")
    return "\n".join(lines)
