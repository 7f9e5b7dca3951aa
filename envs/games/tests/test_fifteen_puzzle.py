from __future__ import annotations

import gem_core
import pytest

from gem_games._base import REWARD_FORMAT_ERROR
from gem_games.fifteen_puzzle import FifteenPuzzleEnv, goal_board, slide, solve

VARIANTS = ["easy", "hard", "random"]


def planner(env: FifteenPuzzleEnv, obs: str) -> str:
    action = env.expert_action()
    if env.turn == 0:  # the whole plan must fit in the turns
        assert len(env._plan) + 1 <= env.params.max_turns
    return action


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANTS)
@pytest.mark.parametrize("seed", range(5), ids=lambda s: f"seed{s}")
def test_planner_solves(variant: str, seed: int, expert_wins) -> None:
    episode = expert_wins(f"game:FifteenPuzzle-v0-{variant}", planner, seed)
    assert "solved" in episode.observations[-1]


@pytest.mark.parametrize("seed", range(10), ids=lambda s: f"seed{s}")
def test_scramble_is_solvable_within_scramble_moves(seed: int) -> None:
    env = FifteenPuzzleEnv(size=3, scramble_moves=12, max_turns=12)
    env.reset(seed=seed)
    assert env.board != goal_board(3)
    plan = solve(env.board, 3)
    assert plan is not None and len(plan) <= 12


def bfs_distance(board: tuple[int, ...], size: int) -> int:
    goal, frontier, seen, depth = goal_board(size), [board], {board}, 0
    while goal not in frontier:
        depth += 1
        frontier = [
            nxt
            for b in frontier
            for d in ("up", "down", "left", "right")
            if (nxt := slide(b, size, d)) is not None and nxt not in seen and not seen.add(nxt)
        ]
    return depth


@pytest.mark.parametrize("seed", range(8), ids=lambda s: f"seed{s}")
def test_unweighted_solver_is_optimal(seed: int) -> None:
    env = FifteenPuzzleEnv(size=3, scramble_moves=14, max_turns=14)
    env.reset(seed=seed)
    plan = solve(env.board, 3)
    assert plan is not None and len(plan) == bfs_distance(env.board, 3)


def board_env(board: tuple[int, ...], size: int = 3, max_turns: int = 30) -> FifteenPuzzleEnv:
    env = FifteenPuzzleEnv(size=size, scramble_moves=1, max_turns=max_turns)
    env.reset(seed=0)
    env.board = board
    return env


def test_directions_name_the_tile_motion() -> None:
    env = board_env((1, 2, 3, 4, 5, 6, 7, 8, 0))
    obs, *_ = env.step("\\boxed{down}")  # the tile above the space (6) slides down
    assert env.board == (1, 2, 3, 4, 5, 0, 7, 8, 6) and "Tile 6 slid down" in obs
    env.step("\\boxed{R}")  # tile 5, left of the space, slides right
    assert env.board == (1, 2, 3, 4, 0, 5, 7, 8, 6)


def test_tile_number_moves_that_tile() -> None:
    env = board_env((1, 2, 3, 4, 5, 6, 7, 0, 8))
    _, reward, terminated, _, info = env.step("\\boxed{8}")
    assert (reward, terminated, info["success"], info["parsed_action"]) == (1.0, True, True, "left")


@pytest.mark.parametrize(("move", "says"), [("up", "No tile can slide up"), ("1", "not next to")], ids=["edge", "far"])
def test_impossible_moves_are_invalid(move: str, says: str) -> None:
    env = board_env((1, 2, 3, 4, 5, 6, 7, 8, 0))
    obs, reward, terminated, _, info = env.step(f"\\boxed{{{move}}}")
    assert (reward, terminated, info["invalid_move"]) == (0.0, False, True) and says in obs


def test_truncation_pays_tiles_in_place() -> None:
    env = board_env((1, 2, 3, 4, 5, 6, 0, 7, 8), max_turns=1)
    _, reward, terminated, truncated, info = env.step("\\boxed{down}")  # tile 4 slides down: 4 leaves its place
    assert truncated and not terminated and info["success"] is False
    assert reward == pytest.approx(5 / 8)


def test_gibberish_is_a_format_error() -> None:
    env = board_env((1, 2, 3, 4, 5, 6, 7, 8, 0))
    obs, reward, terminated, *_ = env.step("\\boxed{diagonal}")
    assert (reward, terminated) == (REWARD_FORMAT_ERROR, True) and "up, down, left, right" in obs


def test_board_is_in_the_observation() -> None:
    env = FifteenPuzzleEnv(size=4, scramble_moves=40, max_turns=50)
    obs, _ = env.reset(seed=0)
    grid = obs.split("Board:\n")[1].split("\n\n")[0].splitlines()
    assert len(grid) == 4 and sorted(grid_tokens := " ".join(grid).split()) == sorted(
        [str(t) for t in range(1, 16)] + ["_"]
    )
    assert len(grid_tokens) == 16


def test_random_variant_sizes() -> None:
    env = gem_core.make("game:FifteenPuzzle-v0-random")
    sizes = set()
    for seed in range(30):
        env.reset(seed=seed)
        sizes.add(env.params.size)
        assert env.params.max_turns >= min(env.params.scramble_moves, 10)
    assert sizes == {2, 3, 4}


def test_turns_below_scramble_is_a_config_error() -> None:
    with pytest.raises(gem_core.errors.ConfigError, match="max_turns"):
        FifteenPuzzleEnv(size=4, scramble_moves=40, max_turns=20)
