import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.errors import ConfigError
from gem_sql import data
from gem_sql.data import BUNDLED_DATABASES, bundled_database, bundled_questions, load_bird, load_spider

SAMPLES = Path(data.__file__).parent / "samples"
_SESSION_CACHE = os.environ["GEM_SQL_CACHE"]


def test_bundled_questions_cover_every_database() -> None:
    questions = bundled_questions()
    assert len(questions) >= 50
    assert {q.db_id for q in questions} == set(BUNDLED_DATABASES)
    assert len({q.id for q in questions}) == len(questions)
    assert all(q.difficulty in {"easy", "medium", "hard"} for q in questions)
    kinds = " ".join(q.query.upper() for q in questions)
    for feature in ("JOIN", "GROUP BY", "HAVING", "ORDER BY", "IS NULL", "NOT IN (SELECT", "LEFT JOIN", "DISTINCT"):
        assert feature in kinds, feature


def test_only_some_databases() -> None:
    assert {q.db_id for q in bundled_questions(["hr", "shop"])} == {"hr", "shop"}
    with pytest.raises(ConfigError, match=r"no bundled database \['nope'\]"):
        bundled_questions(["nope"])
    with pytest.raises(ConfigError, match="no bundled database 'nope'"):
        bundled_database("nope")


def test_the_cache_file_is_read_only_and_named_by_content() -> None:
    path = bundled_database("hr")
    assert path.parent == data.cache_dir() and path.name.startswith("hr-") and path.suffix == ".sqlite"
    assert path.stat().st_mode & 0o222 == 0
    assert bundled_database("hr") == path


def test_racing_first_uses_build_one_complete_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEM_SQL_CACHE", str(tmp_path / "cache"))
    paths: list[Path] = []
    threads = [threading.Thread(target=lambda: paths.append(bundled_database("school"))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(paths)) == 1
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [paths[0].name]  # no temporary left


def test_processes_racing_on_the_first_use_build_one_file(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    code = "from gem_sql.data import bundled_database; print(bundled_database('library'))"
    env = {**os.environ, "GEM_SQL_CACHE": str(cache)}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env) for _ in range(4)]
    outputs = {proc.communicate(timeout=60)[0].decode().strip() for proc in procs}
    assert all(proc.returncode == 0 for proc in procs) and len(outputs) == 1
    assert [p.name for p in cache.iterdir()] == [Path(outputs.pop()).name]
    conn = sqlite3.connect(f"file:{next(cache.iterdir())}?mode=ro", uri=True)
    try:
        assert conn.execute("SELECT count(*) FROM loans").fetchone() == (150,)
    finally:
        conn.close()


def test_spider_sample_loads() -> None:
    questions = load_spider(SAMPLES / "spider")
    assert [q.id for q in questions] == [f"spider-dev-{i}" for i in range(5)]
    assert {q.db_id for q in questions} == {"pets", "concerts"}
    assert all(q.db_path.is_file() and q.evidence == "" for q in questions)
    assert [q.db_id for q in load_spider(SAMPLES / "spider", db_ids=["concerts"])] == ["concerts"] * 2


def test_bird_sample_loads_with_evidence() -> None:
    questions = load_bird(SAMPLES / "bird")
    assert len(questions) == 3 and questions[0].evidence == "mythic refers to rarity = 'mythic'"
    assert [q.difficulty for q in questions] == ["simple", "moderate", "simple"]


def copy_spider(tmp_path: Path) -> Path:
    root = tmp_path / "spider"
    shutil.copytree(SAMPLES / "spider", root)
    return root


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda r: (r / "dev.json").unlink(), r"no file .*dev\.json"),
        (lambda r: (r / "dev.json").write_text("{oops"), r"dev\.json: not JSON"),
        (lambda r: (r / "dev.json").write_text('{"a": 1}'), "expected a JSON list of objects"),
        (
            lambda r: (r / "dev.json").write_text('[{"db_id": "pets", "question": "q"}]'),
            r"item 0: no text field 'query'",
        ),
        (lambda r: shutil.rmtree(r / "database" / "pets"), r"item 0: no database file .*pets\.sqlite"),
        (lambda r: (r / "tables.json").write_text('[{"db_id": "concerts"}]'), r"db_id 'pets' is not in .*tables\.json"),
        (lambda r: (r / "dev.json").write_text("[]"), "no questions"),
    ],
    ids=["no-split", "bad-json", "not-a-list", "no-query", "no-database", "unknown-db", "empty"],
)
def test_a_broken_layout_names_the_file_and_item(tmp_path: Path, damage, message: str) -> None:
    root = copy_spider(tmp_path)
    damage(root)
    with pytest.raises(ConfigError, match=message):
        load_spider(root)


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a directory"):
        load_bird(tmp_path / "missing")


def test_other_split_and_db_dir(tmp_path: Path) -> None:
    root = copy_spider(tmp_path)
    (root / "database").rename(root / "dbs")
    (root / "train_spider.json").write_text(json.dumps([{"db_id": "pets", "question": "q", "query": "SELECT 1"}]))
    [question] = load_spider(root, split="train_spider.json", db_dir="dbs")
    assert question.id == "spider-train_spider-0" and question.db_path == root / "dbs" / "pets" / "pets.sqlite"


def _under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "file").write_text("x")
    return tmp_path / "file" / "cache"


def _a_file(tmp_path: Path) -> Path:
    (tmp_path / "cache").write_text("x")
    return tmp_path / "cache"


def _disk_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(data.tempfile, "mkstemp", full)
    return tmp_path / "cache"


def _sqlite_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    real = sqlite3.connect

    class Full:
        def __init__(self, path: str) -> None:
            self.conn = real(path)

        def executescript(self, text: str) -> None:
            raise sqlite3.OperationalError("database or disk is full")

        def close(self) -> None:
            self.conn.close()

    monkeypatch.setattr(data.sqlite3, "connect", Full)
    return tmp_path / "cache"


@pytest.mark.parametrize(
    "broken_cache",
    [
        lambda tmp, mp: _under_a_file(tmp),
        lambda tmp, mp: _a_file(tmp),
        _disk_full,
        _sqlite_full,
    ],
    ids=["under-a-file", "is-a-file", "disk-full-on-create", "disk-full-while-building"],
)
def test_a_cache_that_cannot_hold_the_build_is_a_config_error_naming_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken_cache
) -> None:
    cache = broken_cache(tmp_path, monkeypatch)
    monkeypatch.setenv("GEM_SQL_CACHE", str(cache))
    with pytest.raises(
        ConfigError, match=rf"cannot build the bundled database 'hr' in {re.escape(str(cache))}.*GEM_SQL_CACHE"
    ):
        bundled_database("hr")
    leftovers = [p.name for p in cache.iterdir()] if cache.is_dir() else []
    assert leftovers == []  # no half-built file left to be taken for a database later


_GOOD_LINE = {"id": "x-1", "db_id": "hr", "question": "q?", "query": "SELECT 1", "difficulty": "easy"}


@settings(max_examples=60, deadline=None)
@given(
    key=st.sampled_from(["id", "db_id", "question", "query", "difficulty"]),
    value=st.one_of(st.none(), st.integers(), st.lists(st.text(max_size=3), max_size=2), st.just("hrr"), st.just(None)),
    drop=st.booleans(),
    position=st.integers(0, 3),
)
def test_a_broken_questions_line_is_a_config_error_naming_it(
    key: str, value: object, drop: bool, position: int
) -> None:
    """A missing field, a non-text one, an unknown db_id: never a silently dropped question or a KeyError."""
    broken = dict(_GOOD_LINE)
    if drop and key != "difficulty":
        del broken[key]
    elif key == "db_id" or not isinstance(value, str):
        broken[key] = value
    else:
        return  # any text is a valid value of the other fields
    lines = [{**_GOOD_LINE, "id": f"ok-{i}"} for i in range(3)]
    lines.insert(position, broken)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "questions.jsonl"
        path.write_text("\n".join(json.dumps(line) for line in lines))
        with pytest.raises(ConfigError, match=rf"question {position + 1}: "):
            data._checked_question_rows(path)


def test_a_repeated_question_id_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "questions.jsonl"
    path.write_text(json.dumps(_GOOD_LINE) + "\n" + json.dumps(_GOOD_LINE))
    with pytest.raises(ConfigError, match="question 2: id 'x-1' appears twice"):
        data._checked_question_rows(path)


@settings(max_examples=25, deadline=None)
@given(cut=st.integers(0, 20_000), noise=st.binary(min_size=1, max_size=32), at=st.integers(0, 120))
def test_a_damaged_cached_database_is_built_again(cut: int, noise: bytes, at: int) -> None:
    """A cached file cut short or with a scribbled header is rebuilt, never served."""
    with tempfile.TemporaryDirectory() as folder:
        os.environ["GEM_SQL_CACHE"] = folder
        try:
            path = bundled_database("hr")
            whole = path.read_bytes()
            damaged = bytearray(whole[: min(cut, len(whole) - 1)])
            damaged[at : at + len(noise)] = noise
            path.chmod(0o644)
            path.write_bytes(bytes(damaged))
            if data._intact(path):  # the noise happened to leave a whole file: nothing to rebuild
                return
            assert bundled_database("hr") == path and path.read_bytes() == whole
        finally:
            os.environ["GEM_SQL_CACHE"] = _SESSION_CACHE
