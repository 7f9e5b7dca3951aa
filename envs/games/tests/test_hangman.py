from __future__ import annotations

import gem_core
import pytest

from gem_games._base import REWARD_FORMAT_ERROR
from gem_games.hangman import HangmanEnv

VARIANTS = ["easy", "hard", "random"]


# Three-letter words in ten turns cannot always be told apart (bat, cat, fat, hat, mat, pat, rat, ...),
# so the expert is held to a win rate; every win must collect exactly 1.
WIN_RATE = {"easy": 0.75, "hard": 0.95, "random": 0.9}


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANTS)
def test_splitting_expert_solves(variant: str, play) -> None:
    env = gem_core.make(f"game:Hangman-v0-{variant}")
    wins = 0
    for seed in range(40):
        episode = play(env, seed=seed)
        if episode.info["success"]:
            wins += 1
            assert episode.terminated and episode.total == pytest.approx(1.0)
        else:
            assert episode.truncated and episode.total < 1.0
    assert wins / 40 >= WIN_RATE[variant]


def test_letter_rewards_scale_with_revealed_positions() -> None:
    env = HangmanEnv(word_length=5, max_turns=15)
    env.reset(seed=0)
    env.secret, env.revealed = "sheep", [False] * 5
    obs, reward, *_ = env.step("\\boxed{E}")
    assert reward == pytest.approx(0.5 * 2 / 5) and "Word: _ _ E E _" in obs and "2 times" in obs
    assert env.step("\\boxed{z}")[1] == 0.0
    obs = env.step("\\boxed{s}")[0]
    assert "Letters guessed: E, Z, S" in obs and "Not in the word: Z" in obs
    _, reward, terminated, _, info = env.step("\\boxed{sheep}")
    assert reward == pytest.approx(0.5 * 2 / 5 + 0.5) and terminated and info["success"]


def test_last_letter_adds_the_solve_bonus() -> None:
    env = HangmanEnv(word_length=3, max_turns=10)
    env.reset(seed=0)
    env.secret, env.revealed = "cat", [True, True, False]
    _, reward, terminated, _, info = env.step("\\boxed{t}")
    assert reward == pytest.approx(0.5 / 3 + 0.5) and terminated and info["success"]


def test_wrong_word_costs_a_turn_only() -> None:
    env = HangmanEnv(word_length=3, max_turns=10)
    env.reset(seed=0)
    env.secret = "cat"
    obs, reward, terminated, _, info = env.step("\\boxed{dog}")
    assert (reward, terminated, info["invalid_move"]) == (0.0, False, False) and "Wrong words: DOG" in obs


@pytest.mark.parametrize(("content", "says"), [("a", "already"), ("abcd", "has 4 letters")], ids=["repeat", "length"])
def test_repeats_and_wrong_lengths_are_invalid_moves(content: str, says: str) -> None:
    env = HangmanEnv(word_length=3, max_turns=10)
    env.reset(seed=0)
    env.step("\\boxed{a}")
    obs, reward, terminated, _, info = env.step(f"\\boxed{{{content}}}")
    assert (reward, terminated, info["invalid_move"]) == (0.0, False, True) and says in obs


def test_symbols_are_a_format_error() -> None:
    env = HangmanEnv()
    env.reset(seed=0)
    assert env.step("\\boxed{?}")[1:3] == (REWARD_FORMAT_ERROR, True)


def test_running_out_of_turns_reveals_the_word() -> None:
    env = HangmanEnv(word_length=3, max_turns=1)
    env.reset(seed=0)
    env.secret = "cat"
    obs, _, terminated, truncated, _ = env.step("\\boxed{z}")
    assert truncated and not terminated and "the word was CAT" in obs


def test_random_variant_lengths() -> None:
    env = gem_core.make("game:Hangman-v0-random")
    lengths = set()
    for seed in range(40):
        env.reset(seed=seed)
        n = env.params.word_length
        assert len(env.secret) == n and env.params.max_turns == (5 * n + 5) // 2
        lengths.add(n)
    assert lengths == {3, 4, 5, 6, 7}
