from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest


def load_tokenizer_module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "gem_test_chat_tokenizer", Path(__file__).with_name("chat_tokenizer.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def chat_tokenizer() -> Any:
    pytest.importorskip("transformers")
    return load_tokenizer_module().build_chat_tokenizer()
