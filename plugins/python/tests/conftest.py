"""Fixtures of the python tool's tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def allowed_tmp_entries() -> set[str]:
    """Names the sandbox's private /tmp shows besides ``work``: the top folders of allowed paths under /tmp.

    The sandbox binds the interpreter and the importable packages read-only at their own
    paths, so a checkout or venv that lives under /tmp (a CI clone, a tox env there) shows its
    top folder. Nothing else of the host's /tmp may appear.
    """
    entries = set()
    for raw in (sys.prefix, sys.base_prefix, *sys.path):
        try:
            path = Path(raw).resolve()
        except OSError:
            continue
        if len(path.parts) > 2 and path.parts[1] == "tmp":
            entries.add(path.parts[2])
    return entries
