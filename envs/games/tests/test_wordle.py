from __future__ import annotations

import gem_core
import pytest

from gem_games._base import REWARD_FORMAT_ERROR
from gem_games.wordle import WordleEnv, score_guess

VARIANTS = ["easy", "hard", "random"]


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANTS)
@pytest.mark.parametrize("seed", range(20), ids=lambda s: f"seed{s}")
def test_elimination_expert_solves(variant: str, seed: int, expert_wins) -> None:
    expert_wins(f"game:Wordle-v0-{variant}", seed=seed)


@pytest.mark.parametrize(
    ("guess", "secret", "marks"),
    [("crane", "crane", "GGGGG"), ("babes", "abbey", "YYGGX"), ("eerie", "crane", "XXYXG"),
     ("speed", "abide", "XXYXY"), ("aaa", "bab", "XGX")],
    ids=["solved", "repeated-b", "surplus-e", "yellow-then-grey", "one-copy"],
)  # fmt: skip
def test_score_guess(guess: str, secret: str, marks: str) -> None:
    assert score_guess(guess, secret) == marks


def test_rewards_pay_new_greens_then_the_solve() -> None:
    env = WordleEnv(word_length=5, max_turns=25)
    env.reset(seed=0)
    env.secret = "crane"
    assert env.step("\\boxed{crate}")[1] == pytest.approx(0.4)  # c r a _ e: four new greens of five
    assert env.step("\\boxed{crave}")[1] == 0.0  # the same greens again
    _, reward, terminated, _, info = env.step("\\boxed{ Crane }")
    assert reward == pytest.approx(0.1 + 0.5) and terminated and info["success"]


def test_board_shows_every_guess_and_the_letters_ruled_out() -> None:
    env = WordleEnv(word_length=5, max_turns=25)
    env.reset(seed=0)
    env.secret = "crane"
    obs = env.step("\\boxed{sloth}")[0]
    obs = env.step("\\boxed{crate}")[0]
    assert "1. S L O T H\n   X X X X X" in obs and "2. C R A T E\n   G G G X G" in obs
    assert "Known letters: C R A _ E" in obs and "Not in the word: H, L, O, S, T" in obs


@pytest.mark.parametrize(
    ("content", "says"), [("cat", "has 3 letters"), ("crane", "already")], ids=["length", "repeat"]
)
def test_wrong_length_and_repeats_are_invalid_moves(content: str, says: str) -> None:
    env = WordleEnv(word_length=5, max_turns=25)
    env.reset(seed=0)
    env.secret = "about"
    env.step("\\boxed{crane}")
    obs, reward, terminated, _, info = env.step(f"\\boxed{{{content}}}")
    assert (reward, terminated, info["invalid_move"]) == (0.0, False, True) and says in obs


def test_only_known_words_refuses_non_words() -> None:
    env = WordleEnv(word_length=5, only_known_words=True)
    env.reset(seed=0)
    obs, _, _, _, info = env.step("\\boxed{zzzzz}")
    assert info["invalid_move"] and "not in my word list" in obs


def test_digits_are_a_format_error() -> None:
    env = WordleEnv(word_length=3, max_turns=15)
    env.reset(seed=0)
    obs, reward, terminated, _, _ = env.step("\\boxed{123}")
    assert reward == REWARD_FORMAT_ERROR and terminated and "3-letter word" in obs


def test_running_out_of_turns_reveals_the_word() -> None:
    env = WordleEnv(word_length=3, max_turns=1)
    env.reset(seed=0)
    env.secret = "cat"
    obs, _, terminated, truncated, info = env.step("\\boxed{dog}")
    assert truncated and not terminated and info["success"] is False and "the word was CAT" in obs


def test_random_variant_lengths() -> None:
    env = gem_core.make("game:Wordle-v0-random")
    lengths = set()
    for seed in range(30):
        env.reset(seed=seed)
        assert len(env.secret) == env.params.word_length and env.params.max_turns == 5 * env.params.word_length
        lengths.add(env.params.word_length)
    assert lengths == {3, 4, 5}
