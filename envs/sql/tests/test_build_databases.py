import json
import sqlite3
from pathlib import Path

import pytest

from gem_sql import build_databases
from gem_sql.data import BUNDLED_DATABASES

PACKAGE = Path(build_databases.__file__).parent


def dump(path: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def test_the_shipped_sql_is_the_scripts_output() -> None:
    built = build_databases.build_all()
    assert sorted(built) == sorted(BUNDLED_DATABASES)
    for name, text in built.items():
        assert (PACKAGE / "databases" / f"{name}.sql").read_text(encoding="utf-8") == text, name


def test_the_shipped_samples_are_the_scripts_output(tmp_path: Path) -> None:
    build_databases.build_samples(tmp_path)
    shipped = PACKAGE / "samples"
    files = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(shipped) for p in shipped.rglob("*") if p.is_file())
    for rel in files:
        if rel.suffix == ".sqlite":  # SQLite's bytes vary by version: compare the contents
            assert dump(tmp_path / rel) == dump(shipped / rel), rel
        else:
            assert json.loads((tmp_path / rel).read_text()) == json.loads((shipped / rel).read_text()), rel


@pytest.mark.parametrize("name", BUNDLED_DATABASES)
def test_each_database_has_nulls_to_ask_about(name: str) -> None:
    text = (PACKAGE / "databases" / f"{name}.sql").read_text(encoding="utf-8")
    assert "NULL)" in text or "NULL," in text
