"""Fixtures of the python tool's tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


def _allowed_paths() -> list[Path]:
    """The host paths the sandbox binds read-only at their own place: the interpreter and sys.path."""
    paths = []
    for raw in (sys.prefix, sys.base_prefix, sys.executable, *sys.path):
        try:
            paths.append(Path(raw).resolve())
        except OSError:
            continue
    return paths


@pytest.fixture(scope="session")
def allowed_root_entries() -> set[str]:
    """Names the sandbox's root shows because an allowed path lives under them.

    A CI clone under ``/check``, a tox env under ``/builds`` or a pyenv interpreter under
    ``/root`` show their top folder; nothing else of the host's root may appear.
    """
    return {path.parts[1] for path in _allowed_paths() if len(path.parts) > 1}


@pytest.fixture(scope="session")
def allowed_tmp_entries() -> set[str]:
    """Names the sandbox's private /tmp shows besides ``work``: the top folders of allowed paths under /tmp.

    The sandbox binds the interpreter and the importable packages read-only at their own
    paths, so a checkout or venv that lives under /tmp (a CI clone, a tox env there) shows its
    top folder. Nothing else of the host's /tmp may appear.
    """
    return {path.parts[2] for path in _allowed_paths() if len(path.parts) > 2 and path.parts[1] == "tmp"}
