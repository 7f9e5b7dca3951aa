"""Sudoku: generator, solver, the expert, and each placement rule with its exact reward."""

from __future__ import annotations

import random

import gem_core
import pytest

from gem_games._base import REWARD_FORMAT_ERROR, GameEnv
from gem_games.sudoku import SudokuBoard, SudokuEnv, count_solutions, generate_puzzle, solve

VARIANTS = ["game:Sudoku-v0-easy", "game:Sudoku-v0-hard", "game:Sudoku-v0-random"]


def expert(env: GameEnv, obs: str) -> str:
    return env.expert_action()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("scale", "clues"), [(4, 10), (4, 6), (9, 50), (9, 30)], ids=["4x4-10", "4x4-6", "9x9-50", "9x9-30"]
)
def test_generated_puzzles_have_one_solution(scale: int, clues: int) -> None:
    for seed in range(3):
        puzzle, solution = generate_puzzle(scale, clues, random.Random(seed))
        assert sum(v != 0 for row in puzzle for v in row) == clues
        assert count_solutions(puzzle) == 1
        assert solve(puzzle) == solution
        assert all(puzzle[r][c] in (0, solution[r][c]) for r in range(scale) for c in range(scale))
        for line in [*solution, *zip(*solution, strict=True)]:
            assert sorted(line) == list(range(1, scale + 1))


def test_solver_reports_no_solution() -> None:
    grid = [[1, 1, 0, 0], [0] * 4, [0] * 4, [0] * 4]
    assert solve(grid) is None
    assert count_solutions(grid) == 0


@pytest.mark.parametrize("env_id", VARIANTS, ids=VARIANTS)
@pytest.mark.parametrize("seed", [0, 1, 2], ids=["seed0", "seed1", "seed2"])
def test_expert_solves_for_full_reward(env_id: str, seed: int, play) -> None:
    env = gem_core.make(env_id)
    assert isinstance(env, SudokuEnv)
    episode = play(env, expert, seed)
    assert (episode.terminated, episode.truncated, episode.info["success"]) == (True, False, True)
    assert episode.turns == env.board.num_empty_at_start <= env.params.max_turns, "one turn per empty cell"
    assert episode.total == pytest.approx(1.0, abs=1e-9) and "You won!" in episode.observations[-1]


@pytest.fixture
def env() -> SudokuEnv:
    game = SudokuEnv(scale=4, clues=10, max_turns=15)
    game.reset(seed=3)
    return game


def first_cell(env: SudokuEnv, *, empty: bool) -> tuple[int, int]:
    return next((r, c) for r in range(4) for c in range(4) if (env.board.puzzle[r][c] == 0) is empty)


def test_observation_shows_the_whole_board(env: SudokuEnv) -> None:
    obs, _ = env.reset(seed=3)
    assert env.board.render() in obs
    assert "Empty cells left: 6." in obs and "You have 15 turns." in obs and "\\boxed{" in obs


def test_correct_placement_pays_one_over_empty_cells(env: SudokuEnv) -> None:
    r, c = first_cell(env, empty=True)
    digit = env.board.solution[r][c]
    obs, reward, terminated, truncated, info = env.step(f"\\boxed{{{r + 1} {c + 1} {digit}}}")
    assert reward == pytest.approx(1 / 6)
    assert (terminated, truncated) == (False, False)
    assert info == {
        "turn": 1,
        "format_error": False,
        "parsed_action": f"{r + 1} {c + 1} {digit}",
        "invalid_move": False,
    }
    assert obs.startswith(f"Placed {digit} at ({r + 1}, {c + 1}).") and "Empty cells left: 5." in obs


def test_clue_cell_is_rejected(env: SudokuEnv) -> None:
    r, c = first_cell(env, empty=False)
    clue = env.board.puzzle[r][c]
    obs, reward, terminated, truncated, info = env.step(f"\\boxed{{{r + 1} {c + 1} {clue % 4 + 1}}}")
    assert (reward, terminated, truncated, info["invalid_move"]) == (0.0, False, False, True)
    assert obs.startswith(f"Cell ({r + 1}, {c + 1}) is a given clue ({clue}) and cannot be changed. That turn is lost.")
    assert env.board.grid[r][c] == clue


def test_rule_breaking_and_wrong_digits_are_rejected(env: SudokuEnv) -> None:
    r, c = first_cell(env, empty=True)
    in_row = next(v for v in env.board.grid[r] if v)
    obs, reward, *_ = env.step(f"\\boxed{{{r + 1} {c + 1} {in_row}}}")
    assert reward == 0.0 and "repeats a digit in its row, column or box" in obs
    assert env.board.grid[r][c] == 0


def test_filled_and_off_board_cells_are_rejected(env: SudokuEnv) -> None:
    r, c = first_cell(env, empty=True)
    digit = env.board.solution[r][c]
    env.step(f"\\boxed{{{r + 1} {c + 1} {digit}}}")
    obs, reward, *_ = env.step(f"\\boxed{{{r + 1} {c + 1} {digit}}}")
    assert reward == 0.0 and f"is already filled with {digit}" in obs
    obs, reward, *_ = env.step("\\boxed{5 1 1}")
    assert reward == 0.0 and "(5, 1) is off the board" in obs
    obs, reward, *_ = env.step("\\boxed{1 1 7}")
    assert reward == 0.0 and "Digits go from 1 to 4" in obs


@pytest.mark.parametrize(
    "action", ["\\boxed{1 2}", "\\boxed{one two three}", "1 2 3"], ids=["two-numbers", "words", "no-box"]
)
def test_malformed_move_is_a_format_error(env: SudokuEnv, action: str) -> None:
    obs, reward, terminated, truncated, info = env.step(action)
    assert (reward, terminated, truncated, info["format_error"]) == (REWARD_FORMAT_ERROR, True, False, True)
    assert "\\boxed{2 3 4}" in obs


def test_tolerant_move_syntax() -> None:
    assert SudokuBoard.parse("row 1, col 2: 3") == (1, 2, 3)
    assert SudokuBoard.parse("[1 2 3]") == (1, 2, 3)
    assert SudokuBoard.parse("1 2") is None


def test_turn_limit_truncates() -> None:
    env = SudokuEnv(scale=4, clues=10, max_turns=2)
    env.reset(seed=0)
    r, c = next((r, c) for r in range(4) for c in range(4) if env.board.puzzle[r][c])
    env.step(f"\\boxed{{{r + 1} {c + 1} 1}}")
    obs, reward, terminated, truncated, info = env.step(f"\\boxed{{{r + 1} {c + 1} 1}}")
    assert (reward, terminated, truncated, info["success"]) == (0.0, False, True, False)
    assert obs.endswith("Out of turns.")


def test_bad_config_names_the_field() -> None:
    with pytest.raises(gem_core.errors.ConfigError, match="scale"):
        SudokuEnv(scale=5)
    with pytest.raises(gem_core.errors.ConfigError, match="clues"):
        SudokuEnv(scale=4, clues=16)
