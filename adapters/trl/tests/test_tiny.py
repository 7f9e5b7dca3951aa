"""The local tiny model and its format warm-up."""

from __future__ import annotations

import torch
from gem_trl import build_tiny_model, build_tiny_tokenizer
from gem_trl.tiny import env_corpus, warm_up


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


def test_an_env_trained_tokenizer_makes_episodes_shorter_and_keeps_every_text() -> None:
    core, trained = build_tiny_tokenizer(), build_tiny_tokenizer("game:GuessTheNumber-v0-easy")
    texts = env_corpus("game:GuessTheNumber-v0-easy", episodes=4, seed=99)
    core_length = sum(len(core.encode(t, add_special_tokens=False)) for t in texts)
    trained_length = sum(len(trained.encode(t, add_special_tokens=False)) for t in texts)
    assert trained_length < core_length / 2
    for text in [*texts, "Ünïcode ✓ and words the game never says", "\\boxed{A C} 12345"]:
        assert trained.decode(trained.encode(text, add_special_tokens=False)) == text


def test_env_corpus_follows_env_kwargs() -> None:
    texts = env_corpus("game:TowerofHanoi-v0-easy", episodes=2, env_kwargs={"num_disks": 2, "max_turns": 5})
    assert "Peg A holds 2 disks" in texts[3]
    assert sum("You have 5 turns" in t for t in texts) == 2
