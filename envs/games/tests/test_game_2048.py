"""2048: sliding and merging, the expectimax expert, no-op moves, log2 progress rewards."""

from __future__ import annotations

import math

import gem_core
import pytest

from gem_games._base import REWARD_FORMAT_ERROR, GameEnv
from gem_games.game_2048 import Game2048Env, progress, slide


def expert(env: GameEnv, obs: str) -> str:
    return env.expert_action()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("row", "left", "right"),
    [
        ([2, 2, 2, 2], [4, 4, 0, 0], [0, 0, 4, 4]),
        ([2, 0, 2, 4], [4, 4, 0, 0], [0, 0, 4, 4]),
        ([4, 4, 8, 0], [8, 8, 0, 0], [0, 0, 8, 8]),
        ([2, 4, 8, 16], [2, 4, 8, 16], [2, 4, 8, 16]),
        ([0, 0, 0, 2], [2, 0, 0, 0], [0, 0, 0, 2]),
    ],
    ids=["four-equal", "gap", "merge-once", "no-merge", "single"],
)
def test_slide_merges_each_tile_once(row: list[int], left: list[int], right: list[int]) -> None:
    grid = [row, [0] * 4, [0] * 4, [0] * 4]
    assert slide(grid, "left")[0][0] == left
    assert slide(grid, "right")[0][0] == right
    column = [[v, 0, 0, 0] for v in row]
    assert [r[0] for r in slide(column, "up")[0]] == left
    assert [r[0] for r in slide(column, "down")[0]] == right


def test_progress_is_log2_share() -> None:
    assert progress(4, 4, 64) == 0.0
    assert progress(16, 4, 64) == pytest.approx(0.5)
    assert progress(128, 4, 64) == 1.0


@pytest.mark.parametrize(
    ("env_id", "seed"),
    [("game:Game2048-v0-easy", s) for s in (0, 1, 2)] + [("game:Game2048-v0-random", s) for s in (0, 1, 3)],
    ids=["easy-0", "easy-1", "easy-2", "random-0", "random-1", "random-3"],
)
def test_expert_reaches_target_for_full_reward(env_id: str, seed: int, play) -> None:
    env = gem_core.make(env_id)
    assert isinstance(env, Game2048Env)
    episode = play(env, expert, seed)
    assert (episode.terminated, episode.truncated, episode.info["success"]) == (True, False, True)
    assert env.board.max_tile == env.params.target_tile and episode.turns <= env.params.max_turns
    assert episode.total == pytest.approx(1.0, abs=1e-9)


def test_hard_budget_pays_progress_only(play) -> None:
    """512 in 50 moves is out of reach (each move adds ~2.2 to the board): the expert earns log2 progress."""
    env = gem_core.make("game:Game2048-v0-hard")
    assert isinstance(env, Game2048Env)
    episode = play(env, expert, 0)
    assert (episode.terminated, episode.truncated, episode.info["success"], episode.turns) == (False, True, False, 50)
    expected = (math.log2(env.board.max_tile) - math.log2(env.start_tile)) / (9 - math.log2(env.start_tile))
    assert episode.total == pytest.approx(expected)


def set_board(env: Game2048Env, grid: list[list[int]]) -> None:
    env.board.grid = [row[:] for row in grid]
    env.start_tile, env.progress = env.board.max_tile, 0.0


@pytest.fixture
def env() -> Game2048Env:
    game = Game2048Env(target_tile=16, max_turns=5)
    game.reset(seed=0)
    return game


def test_move_that_changes_nothing_is_rejected(env: Game2048Env) -> None:
    set_board(env, [[2, 4, 0, 0], [0] * 4, [0] * 4, [0] * 4])
    obs, reward, terminated, truncated, info = env.step("\\boxed{up}")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info == {"turn": 1, "format_error": False, "parsed_action": "up", "invalid_move": True}
    assert obs.startswith(
        "Sliding up changes nothing; choose a direction in which some tile can move. That turn is lost."
    )
    assert env.board.grid == [[2, 4, 0, 0], [0] * 4, [0] * 4, [0] * 4], "no tile spawns after a no-op"


def test_merge_pays_log2_progress_and_spawns(env: Game2048Env) -> None:
    set_board(env, [[4, 4, 0, 0], [0] * 4, [0] * 4, [0] * 4])
    obs, reward, terminated, truncated, info = env.step("\\boxed{Left}")
    assert reward == pytest.approx(0.5)  # 4 -> 8 of 4 -> 16 on a log2 scale
    assert (terminated, truncated, info["invalid_move"]) == (False, False, False)
    assert obs.startswith("Slid left, merging tiles worth 8.")
    assert sum(v != 0 for row in env.board.grid for v in row) == 2  # the 8 and one spawned tile


def test_reaching_target_wins(env: Game2048Env) -> None:
    set_board(env, [[8, 8, 0, 0], [0] * 4, [0] * 4, [0] * 4])
    obs, reward, terminated, truncated, info = env.step("\\boxed{r}")
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    assert "You built 16!" in obs and obs.endswith("You won!")


def test_stuck_board_is_a_loss() -> None:
    env = Game2048Env(target_tile=64, max_turns=5)
    env.reset(seed=0)
    # After sliding right the only empty cell is (4, 1), next to an 8 and a 16: a spawned 2 or 4 merges with nothing.
    set_board(env, [[2, 4, 2, 4], [4, 2, 4, 2], [8, 4, 2, 4], [16, 8, 2, 0]])
    obs, reward, terminated, truncated, info = env.step("\\boxed{right}")
    assert env.board.grid[3][1:] == [16, 8, 2] and env.board.grid[3][0] in (2, 4)
    assert (reward, terminated, truncated, info["success"]) == (0.0, True, False, False)
    assert "The board is stuck" in obs and obs.endswith("Game over: you lost.")


@pytest.mark.parametrize(
    "action", ["\\boxed{up or down}", "\\boxed{jump}", "go left"], ids=["two", "unknown", "no-box"]
)
def test_unclear_direction_is_a_format_error(env: Game2048Env, action: str) -> None:
    obs, reward, terminated, truncated, info = env.step(action)
    assert (reward, terminated, truncated, info["format_error"]) == (REWARD_FORMAT_ERROR, True, False, True)
    assert "\\boxed{left}" in obs


def test_bad_target_names_the_field() -> None:
    with pytest.raises(gem_core.errors.ConfigError, match="target_tile"):
        Game2048Env(target_tile=100)
