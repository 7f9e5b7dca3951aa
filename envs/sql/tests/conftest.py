import os
import tempfile
from pathlib import Path

import pytest

# The bundled databases are built into a private cache for the test session, not the user's.
_CACHE = tempfile.TemporaryDirectory(prefix="gem-sql-test-")
os.environ["GEM_SQL_CACHE"] = _CACHE.name


@pytest.fixture
def shop_copy(tmp_path: Path) -> Path:
    """A private copy of the bundled shop database, in a folder of its own (hostile tests watch the folder)."""
    from gem_sql.data import bundled_database

    folder = tmp_path / "db"
    folder.mkdir()
    target = folder / "shop.sqlite"
    target.write_bytes(bundled_database("shop").read_bytes())
    target.chmod(0o444)
    return target
