"""The tokenizers built in code for tests: any text round-trips, a corpus shortens it, digits can stay apart."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.testing_tokenizers import build_chat_tokenizer

CORPUS = [f"{n} is wrong: the secret number is higher than {n}. Answer \\boxed{{{n + 1}}}." for n in range(40)]


@pytest.fixture(scope="module", params=[False, True], ids=["digits-merged", "digits-apart"])
def trained(request: pytest.FixtureRequest) -> Any:
    return build_chat_tokenizer(vocab_size=500, corpus=CORPUS, split_digits=request.param)


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=60))
def test_any_text_round_trips(trained: Any, text: str) -> None:
    assert trained.decode(trained.encode(text, add_special_tokens=False)) == text


def test_a_corpus_shortens_its_own_text() -> None:
    default, trained = build_chat_tokenizer(), build_chat_tokenizer(vocab_size=500, corpus=CORPUS)
    length = {
        name: sum(len(t.encode(c, add_special_tokens=False)) for c in CORPUS)
        for name, t in (("default", default), ("trained", trained))
    }
    assert length["trained"] < length["default"] / 2


@pytest.mark.parametrize("number", [0, 5, 10, 39, 40, 123, 2026], ids=lambda n: f"n={n}")
def test_split_digits_gives_a_number_one_spelling(number: int) -> None:
    tokenizer = build_chat_tokenizer(vocab_size=500, corpus=CORPUS, split_digits=True)
    alone = tokenizer.encode(str(number), add_special_tokens=False)
    for context in (f"higher than {number}.", f"\\boxed{{{number}}}", f"{number} is wrong"):
        ids = tokenizer.encode(context, add_special_tokens=False)
        assert any(ids[i : i + len(alone)] == alone for i in range(len(ids))), context


def test_same_arguments_same_tokenizer() -> None:
    a = build_chat_tokenizer(vocab_size=500, corpus=CORPUS, split_digits=True)
    b = build_chat_tokenizer(vocab_size=500, corpus=CORPUS, split_digits=True)
    assert a.get_vocab() == b.get_vocab()
