"""Crosswords: grid building, the dictionary expert, letter and word entries with exact rewards."""

from __future__ import annotations

import random

import gem_core
import pytest

from gem_games._base import REWARD_FORMAT_ERROR, GameEnv
from gem_games._words import load_words
from gem_games.crosswords import CrosswordPuzzle, CrosswordsEnv, Entry, build_crossword

VARIANTS = ["game:Crosswords-v0-easy", "game:Crosswords-v0-hard", "game:Crosswords-v0-random"]


def expert(env: GameEnv, obs: str) -> str:
    return env.expert_action()  # type: ignore[attr-defined]


def test_word_list_ships_with_the_package() -> None:
    words = load_words()
    assert len(words) >= 300
    assert {w.tier for w in words} == {"basic", "hard"}
    assert len({w.word for w in words}) == len(words)
    assert all(w.word.isalpha() and w.word.isupper() and w.clue for w in words)


@pytest.mark.parametrize("num_words", [1, 3, 5], ids=lambda n: f"{n}-words")
def test_built_crosswords_are_consistent(num_words: int) -> None:
    for seed in range(10):
        entries = build_crossword(load_words("basic"), num_words, random.Random(seed))
        assert len(entries) == num_words and len({e.word for e in entries}) == num_words
        letters: dict[tuple[int, int], str] = {}
        for e in entries:
            for p, ch in zip(e.cells(), e.word, strict=True):
                assert letters.setdefault(p, ch) == ch, "crossing cells agree"
        if num_words > 1:
            assert len(letters) < sum(len(e.word) for e in entries), "words cross"
        starts = sorted({e.start for e in entries})
        assert sorted({e.number for e in entries}) == list(range(1, len(starts) + 1))


@pytest.mark.parametrize("env_id", VARIANTS, ids=VARIANTS)
@pytest.mark.parametrize("seed", [0, 1, 2], ids=["seed0", "seed1", "seed2"])
def test_expert_solves_for_full_reward(env_id: str, seed: int, play) -> None:
    env = gem_core.make(env_id)
    assert isinstance(env, CrosswordsEnv)
    episode = play(env, expert, seed)
    assert (episode.terminated, episode.truncated, episode.info["success"]) == (True, False, True)
    assert episode.turns == env.params.num_words, "one turn per answer"
    assert episode.total == pytest.approx(1.0, abs=1e-9) and "_" not in episode.observations[-1].split("\n\n")[1]


@pytest.fixture
def env() -> CrosswordsEnv:
    """CAT across at row 1 and TOE down from its T: 5 letter cells."""
    game = CrosswordsEnv(num_words=2, max_turns=4)
    game.reset(seed=0)
    game.puzzle = CrosswordPuzzle(
        [Entry(1, "across", (0, 0), "CAT", "Pet that purrs"), Entry(2, "down", (0, 2), "TOE", "Digit of the foot")]
    )
    return game


def test_board_and_clues_are_rendered(env: CrosswordsEnv) -> None:
    text = env.render()
    assert text.startswith("  1 2 3\n1 _ _ _\n2 # # _\n3 # # _")
    assert "1 across (row 1, column 1, 3 letters): Pet that purrs  [___]" in text
    assert "2 down (row 1, column 3, 3 letters): Digit of the foot  [___]" in text


def test_correct_letter_pays_one_cell_share(env: CrosswordsEnv) -> None:
    obs, reward, terminated, truncated, info = env.step("\\boxed{1 3 t}")
    assert reward == pytest.approx(1 / 5)
    assert (terminated, truncated) == (False, False)
    assert info == {"turn": 1, "format_error": False, "parsed_action": "1 3 T", "invalid_move": False}
    assert obs.startswith("T at (1, 3) is correct.") and "[__T]" in obs and "[T__]" in obs


def test_word_pays_for_its_new_letters_only(env: CrosswordsEnv) -> None:
    env.step("\\boxed{1 3 T}")
    obs, reward, *_ = env.step("\\boxed{2 down toe}")
    assert reward == pytest.approx(2 / 5) and obs.startswith("TOE is correct for 2 down.")
    obs, reward, terminated, truncated, info = env.step("\\boxed{1 across: CAT}")
    assert (terminated, truncated, info["success"]) == (True, False, True)
    assert reward == pytest.approx(2 / 5)


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ("\\boxed{1 1 X}", "X is not the letter at (1, 1)."),
        ("\\boxed{2 1 A}", "(2, 1) is not a letter cell of this crossword."),
        ("\\boxed{1 across DOG}", "DOG is not the answer to 1 across."),
        ("\\boxed{1 across CATS}", "1 across has 3 letters, not 4."),
        ("\\boxed{3 down TOE}", "There is no 3 down in this crossword."),
    ],
    ids=["wrong-letter", "blocked-cell", "wrong-word", "wrong-length", "no-such-clue"],
)
def test_wrong_entries_are_rejected(env: CrosswordsEnv, action: str, message: str) -> None:
    obs, reward, terminated, truncated, info = env.step(action)
    assert (reward, terminated, truncated, info["invalid_move"]) == (0.0, False, False, True)
    assert obs.startswith(f"{message} That turn is lost.")
    assert env.puzzle.filled == {}


def test_repeated_entries_are_rejected(env: CrosswordsEnv) -> None:
    env.step("\\boxed{1 across CAT}")
    obs, reward, *_ = env.step("\\boxed{1 1 C}")
    assert reward == 0.0 and obs.startswith("(1, 1) is already filled with C.")
    obs, reward, *_ = env.step("\\boxed{1 a CAT}")
    assert reward == 0.0 and obs.startswith("1 across is already complete.")


def test_truncation_keeps_what_was_earned(env: CrosswordsEnv) -> None:
    rewards = [env.step(a)[1] for a in ("\\boxed{1 1 C}", "\\boxed{1 1 Z}", "\\boxed{1 2 Z}")]
    _, reward, terminated, truncated, info = env.step("\\boxed{2 2 Z}")
    assert rewards == pytest.approx([0.2, 0.0, 0.0]) and reward == 0.0
    assert (terminated, truncated, info["success"]) == (False, True, False)


def test_unparsable_entry_is_a_format_error(env: CrosswordsEnv) -> None:
    obs, reward, terminated, truncated, info = env.step("\\boxed{the cat}")
    assert (reward, terminated, truncated, info["format_error"]) == (REWARD_FORMAT_ERROR, True, False, True)
    assert "\\boxed{1 across CAT}" in obs


def test_hardcore_draws_from_the_hard_tier() -> None:
    hard = {w.word for w in load_words("hard")}
    env = CrosswordsEnv(num_words=3, hardcore=True)
    for seed in range(5):
        env.reset(seed=seed)
        assert {e.word for e in env.puzzle.entries} <= hard


@pytest.mark.parametrize(
    ("action", "parsed"),
    [
        ("\\boxed{1 across cat}", "1 across CAT"),
        ("\\boxed{1a CAT}", "1 across CAT"),
        ("\\boxed{2 down: TOE}", "2 down TOE"),
        ("\\boxed{2-d toe}", "2 down TOE"),
        ("\\boxed{(1, 3) t}", "1 3 T"),
        ("\\boxed{\\text{1 1 c}}", "1 1 C"),
    ],
    ids=["word", "short-across", "colon", "dash", "parenthesised-cell", "text-wrapper"],
)
def test_tolerant_entry_syntax(env: CrosswordsEnv, action: str, parsed: str) -> None:
    *_, info = env.step(action)
    assert info["parsed_action"] == parsed and info["invalid_move"] is False
