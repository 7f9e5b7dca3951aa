"""The read-only connection: hostile queries end their own call with a clear error and change nothing."""

import hashlib
import os
import re
import sqlite3
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gem_sql.database import MAX_PRINTF_WIDTH, Database, QueryLimits, QueryResult, _GuardedFunctions, format_result

FAST = QueryLimits(timeout_s=0.2, max_rows=20)
CHECK = "SELECT count(*) FROM customers"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listing(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


# Each known way out of a read-only SQLite connection, with the word its error must contain.
KNOWN_ESCAPES = {
    "insert": ("INSERT INTO customers VALUES (99, 'x', 'y', NULL, NULL)", "read-only"),
    "update": ("UPDATE customers SET name = 'x'", "read-only"),
    "delete": ("DELETE FROM customers", "read-only"),
    "replace": ("REPLACE INTO products VALUES (1, 'x', 'y', 1.0)", "read-only"),
    "cte-insert": ("WITH t AS (SELECT 1) INSERT INTO customers SELECT 99, 'x', 'y', NULL, NULL FROM t", "authorized"),
    "cte-delete": ("WITH t AS (SELECT 1) DELETE FROM customers", "authorized"),
    "drop": ("DROP TABLE customers", "read-only"),
    "create": ("CREATE TABLE x (a)", "read-only"),
    "create-temp": ("CREATE TEMP TABLE x (a)", "read-only"),
    "create-view": ("CREATE TEMP VIEW v AS SELECT 1", "read-only"),
    "create-trigger": ("CREATE TRIGGER t AFTER INSERT ON customers BEGIN SELECT 1; END", "read-only"),
    "virtual-table": ("CREATE VIRTUAL TABLE v USING fts5(a)", "read-only"),
    "alter": ("ALTER TABLE customers ADD COLUMN x", "read-only"),
    "attach-file": ("ATTACH DATABASE '{out}' AS x", "read-only"),
    "attach-memory": ("ATTACH ':memory:' AS m", "read-only"),
    "detach": ("DETACH main", "read-only"),
    "vacuum": ("VACUUM", "read-only"),
    "vacuum-into": ("VACUUM INTO '{out}'", "read-only"),
    "vacuum-into-commented": ("/* hi */ -- there\n  vacuum into '{out}'", "read-only"),
    "reindex": ("REINDEX", "read-only"),
    "analyze": ("ANALYZE", "read-only"),
    "begin": ("BEGIN IMMEDIATE", "read-only"),
    "savepoint": ("SAVEPOINT s", "read-only"),
    "pragma-writable-schema": ("PRAGMA writable_schema = 1", "authorized"),
    "pragma-query-only-off": ("PRAGMA query_only = 0", "authorized"),
    "pragma-journal": ("PRAGMA journal_mode = WAL", "authorized"),
    "pragma-user-version": ("PRAGMA user_version = 7", "authorized"),
    "pragma-temp-dir": ("PRAGMA temp_store_directory = '/tmp'", "authorized"),
    "pragma-database-list": ("PRAGMA database_list", "authorized"),
    "pragma-function": ("SELECT * FROM pragma_database_list", "authorized"),
    "load-extension": ("SELECT load_extension('/lib/x86_64-linux-gnu/libc.so.6')", "authorized"),
    "fts3-tokenizer": ("SELECT fts3_tokenizer('simple')", "authorized"),
    "readfile": ("SELECT readfile('/etc/passwd')", "readfile"),
    "writefile": ("SELECT writefile('{out}', 'x')", "writefile"),
    "explain-delete": ("EXPLAIN DELETE FROM customers", "authorized"),
    "second-statement": ("SELECT 1; DROP TABLE customers", "one statement"),
    "two-semicolons": ("SELECT 1;;", "one statement"),
    "recursive-forever": (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
        "longer than",
    ),
    "cross-join": ("SELECT count(*) FROM order_items a, order_items b, order_items c, order_items d", "longer than"),
    "huge-blob": ("SELECT zeroblob(2000000000)", "too big"),
    "huge-string": ("SELECT replace(hex(zeroblob(900000)), '0', 'abc')", "too big"),
    "printf-precision": ("SELECT printf('%.*c', 2000000000, 'x')", "printf"),
    "printf-width": ("SELECT printf('%2000000000d', 1)", "printf"),
    "format-dynamic": ("SELECT format('%' || 99999999 || 'd', 1)", "printf"),
    "nul-byte": ("SELECT 1\x00; DROP TABLE customers", "NUL"),
    "surrogate": ("SELECT '\ud800'", "UnicodeEncodeError"),
    "empty": ("", "no statement"),
    "comment-only": ("-- nothing", "no statement"),
    "deep-nesting": ("SELECT " + "(" * 5000 + "1" + ")" * 5000, "Error"),
    "too-long": ("SELECT 1 -- " + "x" * 30000, "characters long"),
}


@pytest.mark.parametrize(("sql", "needle"), KNOWN_ESCAPES.values(), ids=list(KNOWN_ESCAPES))
def test_a_known_escape_ends_its_own_call_and_changes_nothing(shop_copy: Path, sql: str, needle: str) -> None:
    out = shop_copy.parent / "escaped.db"
    before, files = digest(shop_copy), listing(shop_copy.parent)
    with Database(shop_copy, limits=FAST) as db:
        result = db.run(sql.format(out=out))
        assert result.error is not None and needle in result.error, result
        assert db.run(CHECK).rows == [(40,)]  # the connection is still good for the next query
    assert digest(shop_copy) == before and listing(shop_copy.parent) == files and not out.exists()


def test_the_time_limit_stops_the_query_and_says_so(shop_copy: Path) -> None:
    with Database(shop_copy, limits=FAST) as db:
        result = db.run(KNOWN_ESCAPES["recursive-forever"][0])
        assert result.error == "the query ran longer than 0.2 s and was stopped; make it cheaper"
        assert db.run(CHECK).ok


# Hostile statements built from parts: a write, schema change, file path or pragma, spelled in any case,
# behind comments, with a second statement after it.
_PATHS = st.sampled_from(["{out}", "/etc/passwd", ":memory:", "file:{out}?mode=rwc", "{db}"])
_TEMPLATES = st.sampled_from(
    [
        "ATTACH DATABASE '{p}' AS x",
        "VACUUM INTO '{p}'",
        "SELECT writefile('{p}', 'x')",
        "SELECT load_extension('{p}')",
        "PRAGMA {pragma} = 0",
        "PRAGMA {pragma}",
        "INSERT INTO customers(id, name, city) VALUES (500, '{p}', 'x')",
        "WITH q AS (SELECT 1) UPDATE customers SET email = '{p}'",
        "DROP TABLE {table}",
        "CREATE TEMP TABLE {table} AS SELECT * FROM customers",
        "DELETE FROM {table}",
        "SELECT 1; DELETE FROM {table}",
    ]
)
_PRAGMAS = st.sampled_from(
    ["writable_schema", "query_only", "journal_mode", "locking_mode", "schema_version", "cache_spill", "mmap_size"]
)
_TABLES = st.sampled_from(["customers", "orders", "order_items", "products", "sqlite_master"])
_PREFIXES = st.sampled_from(["", "  ", "\n", "/* c */ ", "-- c\n", "/**/"])


@st.composite
def hostile_sql(draw: st.DrawFn) -> str:
    template = draw(_TEMPLATES)
    # Any mix of upper and lower case in the SQL words; the placeholders (and so the paths) keep theirs.
    parts = re.split(r"(\{[a-z]+\})", template)
    cased = "".join(
        part if part.startswith("{") else "".join(c.upper() if draw(st.booleans()) else c.lower() for c in part)
        for part in parts
    )
    return draw(_PREFIXES) + cased.format(p=draw(_PATHS), pragma=draw(_PRAGMAS), table=draw(_TABLES))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(queries=st.lists(st.one_of(hostile_sql(), st.text(max_size=80)), min_size=1, max_size=5))
def test_no_generated_query_writes_anything(shop_copy: Path, queries: list[str]) -> None:
    out = shop_copy.parent / "escaped.db"
    before, files = digest(shop_copy), listing(shop_copy.parent)
    with Database(shop_copy, limits=FAST) as db:
        for sql in queries:
            result = db.run(sql.replace("{out}", str(out)).replace("{db}", str(shop_copy)))
            assert isinstance(result, QueryResult)
            assert result.ok or (isinstance(result.error, str) and result.error.strip())
            assert db.run(CHECK).rows == [(40,)]
    assert digest(shop_copy) == before and listing(shop_copy.parent) == files and not out.exists()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=hostile_sql())
def test_generated_hostile_statements_are_refused(shop_copy: Path, query: str) -> None:
    with Database(shop_copy, limits=FAST) as db:
        result = db.run(query.replace("{out}", str(shop_copy.parent / "x.db")).replace("{db}", str(shop_copy)))
    assert result.error is not None


def test_a_writable_file_stays_unchanged_too(tmp_path: Path) -> None:
    # immutable=False, file mode 0644: the connection itself must refuse, not the file system.
    path = tmp_path / "rw.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE t (a); INSERT INTO t VALUES (1);")
    conn.close()
    before = digest(path)
    with Database(path, immutable=False, limits=FAST) as db:
        for sql, _ in KNOWN_ESCAPES.values():
            assert db.run(sql.format(out=tmp_path / "x.db").replace("customers", "t")).error is not None
        assert db.run("SELECT a FROM t").rows == [(1,)]
    assert digest(path) == before and sorted(os.listdir(tmp_path)) == ["rw.sqlite"]


@pytest.mark.parametrize(
    ("sql", "rows"),
    [
        ("PRAGMA table_info(customers)", 5),
        ("PRAGMA foreign_key_list(orders)", 1),
        ("EXPLAIN QUERY PLAN SELECT * FROM orders", 1),
        ("VALUES (1), (2)", 2),
        ("WITH t(x) AS (VALUES (1)) SELECT x FROM t", 1),
        ("SELECT printf('%.2f|%5d', 3.14159, 42)", 1),
        ("SELECT format('%d%%', 5)", 1),
        ("SELECT json_extract('{\"a\": 1}', '$.a')", 1),
        ("select name from customers where email is null", 6),
    ],
    ids=["table-info", "foreign-keys", "query-plan", "values", "cte", "printf", "format", "json", "lowercase"],
)
def test_reading_queries_work(shop_copy: Path, sql: str, rows: int) -> None:
    with Database(shop_copy) as db:
        result = db.run(sql)
    assert result.ok and len(result.rows) == rows, result


def test_printf_formats_as_sqlite_does(shop_copy: Path) -> None:
    with Database(shop_copy) as db:
        assert db.run("SELECT printf('%.2f|%5d|%s', 3.14159, 42, 'hi')").rows == [("3.14|   42|hi",)]
        assert db.run(f"SELECT printf('%{MAX_PRINTF_WIDTH}d', 1)").ok
        assert not db.run(f"SELECT printf('%{MAX_PRINTF_WIDTH + 1}d', 1)").ok


# One call of each: SQLite's own function searches naively for minutes (trim: over 5 min on this machine),
# where the deadline, checked between SQLite instructions, cannot stop it.
_BIG = "replace(hex(zeroblob(450000)), '0', 'a')"
_NEEDLE = "(replace(hex(zeroblob({n})), '0', 'b') || 'a')"
FUNCTION_BOMBS = {
    "instr": (f"SELECT instr({_BIG}, {_NEEDLE.format(n=200000)})", [(0,)]),
    "replace": (f"SELECT length(replace({_BIG}, {_NEEDLE.format(n=200000)}, 'x'))", [(900000,)]),
    "trim": (f"SELECT length(trim({_BIG}, {_NEEDLE.format(n=40000)}))", [(0,)]),
    "ltrim": (f"SELECT length(ltrim({_BIG} || 'c', {_NEEDLE.format(n=40000)}))", [(1,)]),
    "rtrim": (f"SELECT length(rtrim('c' || {_BIG}, {_NEEDLE.format(n=40000)}))", [(1,)]),
    "replace-grows": (f"SELECT replace({_BIG}, 'a', {_BIG})", "810,000,000,000 characters"),
    "instr-blob": (f"SELECT instr(CAST({_BIG} AS BLOB), {_NEEDLE.format(n=200000)})", "instr() of a blob"),
}


@pytest.mark.parametrize(("sql", "expected"), FUNCTION_BOMBS.values(), ids=list(FUNCTION_BOMBS))
def test_one_function_call_cannot_outlast_the_deadline(shop_copy: Path, sql: str, expected: object) -> None:
    with Database(shop_copy, limits=QueryLimits(timeout_s=1.0)) as db:
        result = db.run(sql)
        if isinstance(expected, str):
            assert result.error is not None and expected in result.error, result
        else:
            assert result.rows == expected, result
        assert db.run(CHECK).rows == [(40,)]


_ARGUMENTS = st.one_of(
    st.none(),
    st.text(alphabet=st.sampled_from("ab c\u00e9\u4e2d\U0001f600\x00"), max_size=8),
    st.text(max_size=6),
    st.binary(max_size=6),
    st.integers(-1000, 1000),
    st.floats(allow_nan=False, width=32),
)


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(["instr", "replace", "trim", "ltrim", "rtrim", "printf"]), data=st.data())
def test_guarded_functions_return_what_sqlite_returns(name: str, data: st.DataObject) -> None:
    """For any arguments (text, blobs, numbers, NULL), the guarded function and SQLite's own agree."""
    arity = {"replace": 3, "printf": 2}.get(name, 2)
    args = tuple(data.draw(_ARGUMENTS, label=f"arg{i}") for i in range(arity))
    if name == "printf" and not isinstance(args[0], str):
        args = ("%s|%d", *args[1:])
    plain, guarded = sqlite3.connect(":memory:"), sqlite3.connect(":memory:")
    functions = _GuardedFunctions(1_000_000)
    functions.register(guarded)
    plain.text_factory = guarded.text_factory = bytes  # blobs that are not UTF-8 come back as text
    sql = f"SELECT {name}({', '.join('?' * arity)}), typeof({name}({', '.join('?' * arity)}))"
    try:
        expected = plain.execute(sql, args * 2).fetchone()
        try:
            assert guarded.execute(sql, args * 2).fetchone() == expected
        except sqlite3.OperationalError:  # refused only for text Python cannot pass back: a non-UTF-8 blob as text
            assert expected[1] == b"text" and not _is_utf8(expected[0])
            assert "not UTF-8" in functions.refusal
    finally:
        plain.close(), guarded.close(), functions.close()


@pytest.mark.parametrize(
    "value",
    ["randomblob(999000)", "zeroblob(999000)", f"upper({_BIG})", f"replace({_BIG}, 'a', 'b')", f"instr({_BIG}, 'b')"],
    ids=["randomblob", "zeroblob", "upper", "replace", "instr"],
)
def test_the_deadline_is_looked_at_every_few_rows_however_heavy_each_row(shop_copy: Path, value: str) -> None:
    """A deadline already past stops the query within a few rows (counted, not timed), whatever each row costs."""
    rows: list[int] = []
    with Database(shop_copy, limits=QueryLimits(timeout_s=1e-9)) as db:
        db._conn.create_function("counted", 1, lambda v: rows.append(1) or v)
        result = db.run(f"SELECT sum(counted(length({value}))) FROM order_items a, order_items b")
    assert result.error is not None and "longer than" in result.error, result
    assert len(rows) <= 50, len(rows)  # about 25 at 100 instructions a look; about 450 at 2,000


def test_scratch_files_past_their_limit_stop_the_query(shop_copy: Path) -> None:
    """A sort of 1 MB rows spills GBs to temp files within its time limit; the scratch limit stops it first."""
    limits = QueryLimits(timeout_s=120.0, max_scratch_bytes=30_000_000)
    with Database(shop_copy, limits=limits) as db:
        result = db.run("SELECT randomblob(900000) || a.id AS x FROM customers a, customers b, customers c ORDER BY x")
        assert result.error is not None and "temporary files" in result.error and "30,000,000" in result.error, result
        assert db.run("SELECT id FROM customers ORDER BY name LIMIT 2").ok  # small sorts still run


def test_rows_are_capped_and_marked(shop_copy: Path) -> None:
    with Database(shop_copy, limits=QueryLimits(max_rows=7)) as db:
        result = db.run("SELECT * FROM orders")
    assert len(result.rows) == 7 and result.truncated
    text = format_result(result)
    assert text.splitlines()[-1] == "(7 rows shown; the query returned more)"


def test_format_result_caps_cells_and_text() -> None:
    result = QueryResult(columns=["a", "b"], rows=[("x" * 500, None), (1.23456789, b"\x00\x01")] * 50)
    text = format_result(result, max_cell_chars=20, max_chars=300)
    assert len(text) <= 300 + 60
    assert "xxxxxxxxxxxxxxxxx..." in text and "NULL" in text
    assert "more)" in text.splitlines()[-1]
    assert "1.234568 | <blob 2 bytes>" in format_result(QueryResult(columns=["a", "b"], rows=[(1.23456789, b"\0\1")]))
    assert format_result(QueryResult(error="boom")) == "error: boom"


def test_closed_database_answers_with_an_error(shop_copy: Path) -> None:
    db = Database(shop_copy)
    db.close()
    db.close()
    assert db.run(CHECK).error == "the database connection is closed"


def test_not_a_database(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database at all" * 100)
    with pytest.raises(sqlite3.DatabaseError):
        Database(bad)
    with pytest.raises(FileNotFoundError):
        Database(tmp_path / "missing.sqlite")


def test_many_connections_on_one_file_at_once(shop_copy: Path) -> None:
    before = digest(shop_copy)
    errors: list[str] = []

    def worker(i: int) -> None:
        with Database(shop_copy, limits=FAST) as db:
            for _ in range(20):
                ok = db.run(f"SELECT count(*) FROM orders WHERE id > {i}")
                bad = db.run("DELETE FROM orders")
                if ok.rows != [(max(0, 120 - i),)] or bad.ok:
                    errors.append(f"{i}: {ok} {bad}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and digest(shop_copy) == before


def test_one_connection_shared_by_threads_takes_turns(shop_copy: Path) -> None:
    results: list[QueryResult] = []
    with Database(shop_copy) as db:
        threads = [threading.Thread(target=lambda: results.append(db.run(CHECK))) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [r.rows for r in results] == [[(40,)]] * 16
