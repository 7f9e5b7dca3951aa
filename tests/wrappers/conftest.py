from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def chat_tokenizer() -> Any:
    pytest.importorskip("transformers")
    from gem_core.testing_tokenizers import build_chat_tokenizer

    return build_chat_tokenizer()
