"""The local tiny model and its format warm-up."""

from __future__ import annotations

import torch
from gem_trl import build_tiny_model, build_tiny_tokenizer
from gem_trl.tiny import warm_up


def test_tiny_model_matches_tokenizer_and_is_reproducible() -> None:
    tokenizer = build_tiny_tokenizer()
    a, b = build_tiny_model(tokenizer, seed=3), build_tiny_model(tokenizer, seed=3)
    assert a.config.vocab_size == len(tokenizer)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(next(a.parameters()), next(build_tiny_model(tokenizer, seed=4).parameters()))


def test_warm_up_lowers_the_loss_on_legal_moves() -> None:
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer)
    losses = warm_up(model, tokenizer, "core:NumberGuess-v0", steps=6, batch_size=4)
    assert len(losses) == 6
    assert losses[-1] < losses[0] - 0.5
