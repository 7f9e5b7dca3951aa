"""The env runs on oat-llm's own Python when the machine has one (tox's base_python order)."""

from __future__ import annotations

import importlib.metadata
import platform
import sys

import pytest
from packaging.specifiers import SpecifierSet


def test_oat_llm_installed_is_0_2_4() -> None:
    assert importlib.metadata.version("oat-llm") == "0.2.4"


def test_python_is_inside_oat_llm_requires_python(oat_python: str) -> None:
    if sys.version_info >= (3, 11):
        pytest.skip(f"gem-oat ran on {oat_python}")
    requires = importlib.metadata.metadata("oat-llm")["Requires-Python"]
    assert platform.python_version() in SpecifierSet(requires), (platform.python_version(), requires)
