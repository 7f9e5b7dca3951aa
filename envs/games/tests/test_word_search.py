"""WordSearch: grid generation per direction set, the scanning expert, claims with exact rewards."""

from __future__ import annotations

import random

import gem_core
import pytest

from gem_games._base import REWARD_FORMAT_ERROR, GameEnv
from gem_games.word_search import EASY_DIRECTIONS, WordGrid, WordSearchEnv, find_word, generate_grid

VARIANTS = ["game:WordSearch-v0-easy", "game:WordSearch-v0-hard", "game:WordSearch-v0-random"]


def expert(env: GameEnv, obs: str) -> str:
    return env.expert_action()  # type: ignore[attr-defined]


def test_easy_grids_hide_words_across_or_down_only() -> None:
    words = ["APPLE", "TIGER", "RIVER", "CLOCK", "HOUSE"]
    for seed in range(10):
        grid = generate_grid(words, EASY_DIRECTIONS, random.Random(seed))
        assert len(grid) == len(grid[0]) >= 7
        for word in words:
            rows = ["".join(row) for row in grid]
            cols = ["".join(col) for col in zip(*grid, strict=True)]
            assert any(word in line for line in rows + cols)


@pytest.mark.parametrize("env_id", VARIANTS, ids=VARIANTS)
@pytest.mark.parametrize("seed", [0, 1, 2], ids=["seed0", "seed1", "seed2"])
def test_expert_finds_every_word_for_full_reward(env_id: str, seed: int, play) -> None:
    env = gem_core.make(env_id)
    assert isinstance(env, WordSearchEnv)
    episode = play(env, expert, seed)
    assert (episode.terminated, episode.truncated, episode.info["success"]) == (True, False, True)
    assert episode.turns == env.params.num_words, "one turn per word"
    assert episode.total == pytest.approx(1.0, abs=1e-9) and "Words to find: none" in episode.observations[-1]


GRID = ["CATXX", "XOXXX", "XXWXX", "DOGXX", "XXXXX"]


@pytest.fixture
def env() -> WordSearchEnv:
    game = WordSearchEnv(num_words=3, max_turns=4)
    game.reset(seed=0)
    game.grid = WordGrid([list(row) for row in GRID], ["CAT", "COW", "DOG"])
    return game


def test_find_word_scans_all_directions() -> None:
    letters = [list(row) for row in GRID]
    assert find_word(letters, "COW") == ((0, 0), (2, 2))
    assert find_word(letters, "GOD") == ((3, 2), (3, 0))
    assert find_word(letters, "EMU") is None


def test_found_word_pays_its_share_and_shows_in_lower_case(env: WordSearchEnv) -> None:
    obs, reward, terminated, truncated, info = env.step("\\boxed{(1, 1) to (3, 3)}")
    assert reward == pytest.approx(1 / 3)
    assert (terminated, truncated) == (False, False)
    assert info == {"turn": 1, "format_error": False, "parsed_action": "1 1 3 3", "invalid_move": False}
    assert obs.startswith("Found COW!") and "1 c A T X X\n2 X o X X X\n3 X X w X X" in obs
    assert "Words to find: CAT, DOG" in obs and "Found (1 of 3): COW" in obs


def test_a_word_may_be_given_end_to_start(env: WordSearchEnv) -> None:
    obs, reward, *_ = env.step("\\boxed{4 3 4 1}")
    assert reward == pytest.approx(1 / 3) and obs.startswith("Found DOG!")


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ("\\boxed{1 1 1 2}", "(1, 1) to (1, 2) reads CA, which is not one of the words."),
        ("\\boxed{1 1 2 3}", "(1, 1) to (2, 3) is not a straight line across, down or diagonal."),
        ("\\boxed{1 1 1 6}", "Rows and columns go from 1 to 5."),
    ],
    ids=["not-a-word", "not-straight", "off-grid"],
)
def test_bad_claims_are_rejected(env: WordSearchEnv, action: str, message: str) -> None:
    obs, reward, terminated, truncated, info = env.step(action)
    assert (reward, terminated, truncated, info["invalid_move"]) == (0.0, False, False, True)
    assert obs.startswith(f"{message} That turn is lost.")


def test_repeat_claim_is_rejected_and_last_word_wins(env: WordSearchEnv) -> None:
    env.step("\\boxed{1 1 1 3}")
    obs, reward, *_ = env.step("\\boxed{1 3 1 1}")
    assert reward == 0.0 and obs.startswith("You already found CAT.")
    env.step("\\boxed{1 1 3 3}")
    obs, reward, terminated, truncated, info = env.step("\\boxed{4 1 4 3}")
    assert (terminated, truncated, info["success"]) == (True, False, True)
    assert reward == pytest.approx(1 / 3) and obs.endswith("You won!")


def test_turn_limit_truncates(env: WordSearchEnv) -> None:
    for _ in range(3):
        env.step("\\boxed{5 1 5 5}")
    _, reward, terminated, truncated, info = env.step("\\boxed{5 1 5 5}")
    assert (reward, terminated, truncated, info["success"]) == (0.0, False, True, False)


def test_missing_numbers_is_a_format_error(env: WordSearchEnv) -> None:
    obs, reward, terminated, truncated, info = env.step("\\boxed{CAT}")
    assert (reward, terminated, truncated, info["format_error"]) == (REWARD_FORMAT_ERROR, True, False, True)
    assert "\\boxed{1 1 1 5}" in obs
