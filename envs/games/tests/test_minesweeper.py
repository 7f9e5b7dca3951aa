from __future__ import annotations

import gem_core
import pytest

from gem_games._base import REWARD_FORMAT_ERROR
from gem_games.minesweeper import HIDDEN, MinesweeperEnv, deduce

VARIANTS = ["easy", "hard", "random"]


def logician(env: MinesweeperEnv, obs: str) -> str:
    """Reveal a cell that the visible numbers prove safe; never guesses (fails the test instead)."""
    safe, _ = deduce(env.view, env.params.mines)
    assert safe, "the board needs a guess, but boards are generated to be solvable by logic"
    action = env.expert_action()
    row, col = min(safe)
    assert action == f"\\boxed{{reveal {row + 1} {col + 1}}}"
    return action


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANTS)
@pytest.mark.parametrize("seed", range(15), ids=lambda s: f"seed{s}")
def test_logic_expert_clears_the_board(variant: str, seed: int, expert_wins) -> None:
    expert_wins(f"game:Minesweeper-v0-{variant}", logician, seed)


def test_deduce_single_number() -> None:
    hidden = HIDDEN
    view = [[1, hidden], [hidden, hidden]]  # one mine among three cells: nothing certain
    assert deduce(view, 1) == (set(), set())
    view = [[1, 1], [hidden, hidden]]  # both numbers see both hidden cells: still one mine in two
    assert deduce(view, 1) == (set(), set())
    view = [[0, 1, hidden], [0, 1, hidden], [0, 1, 1]]  # the bottom-right 1 sees only (1, 2)
    assert deduce(view, 1) == ({(0, 2)}, {(1, 2)})


def test_deduce_subset_rule() -> None:
    hidden = HIDDEN
    # 1 2 1 under three hidden cells: no single number decides, but the 2 sees both 1s' cells plus one more,
    # so each corner is a mine and the middle is safe.
    view = [[hidden, hidden, hidden], [1, 2, 1], [0, 0, 0]]
    assert deduce(view, 2) == ({(0, 1)}, {(0, 0), (0, 2)})


def opened(seed: int = 0, **config: int) -> MinesweeperEnv:
    env = MinesweeperEnv(**{"rows": 5, "cols": 5, "mines": 5, "max_turns": 25, **config})
    env.reset(seed=seed)
    return env


def test_opening_is_revealed_and_mine_free() -> None:
    for seed in range(20):
        env = opened(seed)
        r, c = env.start
        assert env.view[r][c] == 0 and env.revealed_count > 1 and env.to_reveal > 0
        assert len(env.mines) == 5 and env.start not in env.mines


def test_hitting_a_mine_loses_and_shows_the_mines() -> None:
    env = opened()
    row, col = min(env.mines)
    obs, reward, terminated, truncated, info = env.step(f"\\boxed{{reveal {row + 1} {col + 1}}}")
    assert (reward, terminated, truncated, info["success"]) == (0.0, True, False, False)
    board = obs.split("\n\n")[1].split("(")[0]
    assert "Boom" in obs and board.count("X") == 1 and board.count("*") == 4 and "Game over" in obs


def test_reveal_reward_is_share_of_cells_to_reveal() -> None:
    env = opened()
    safe, _ = deduce(env.view, 5)
    row, col = min(safe)
    before = env.revealed_count
    _, reward, *_ = env.step(f"\\boxed{{{row + 1}, {col + 1}}}")
    assert reward == pytest.approx((env.revealed_count - before) / env.to_reveal)


@pytest.mark.parametrize("content", ["reveal 3 2", "3 2", "(3, 2)", "Reveal: 3,2", "r 3 2", "row 3 col 2"], ids=str)
def test_reveal_spellings(content: str) -> None:
    env = opened()
    assert env.step(f"\\boxed{{{content}}}")[4]["parsed_action"] == "reveal 3 2"


def test_flags_are_shown_and_block_reveals() -> None:
    env = opened()
    row, col = min(env.mines)
    obs = env.step(f"\\boxed{{flag {row + 1} {col + 1}}}")[0]
    assert "F" in obs.split("\n\n")[1]
    obs, _, terminated, _, info = env.step(f"\\boxed{{reveal {row + 1} {col + 1}}}")
    assert not terminated and info["invalid_move"] and "unflag" in obs
    assert env.step(f"\\boxed{{flag {row + 1} {col + 1}}}")[0].startswith("Flag removed")


@pytest.mark.parametrize(("move", "says"), [("reveal 9 9", "outside the grid"), ("reveal 0 1", "outside")], ids=str)
def test_off_board_is_an_invalid_move(move: str, says: str) -> None:
    env = opened()
    obs, reward, terminated, _, info = env.step(f"\\boxed{{{move}}}")
    assert (reward, terminated, info["invalid_move"]) == (0.0, False, True) and says in obs


def test_revealing_twice_is_an_invalid_move() -> None:
    env = opened()
    r, c = env.start
    obs, _, _, _, info = env.step(f"\\boxed{{reveal {r + 1} {c + 1}}}")
    assert info["invalid_move"] and "already revealed" in obs


def test_gibberish_is_a_format_error() -> None:
    env = opened()
    obs, reward, terminated, *_ = env.step("\\boxed{dig somewhere}")
    assert (reward, terminated) == (REWARD_FORMAT_ERROR, True) and "reveal ROW COL" in obs


def test_board_is_labelled_in_the_observation() -> None:
    env = MinesweeperEnv(rows=5, cols=6, mines=5, max_turns=30)
    obs, _ = env.reset(seed=0)
    lines = obs.split("\n\n")[1].splitlines()
    assert lines[0].split() == ["1", "2", "3", "4", "5", "6"]
    assert [line.split()[0] for line in lines[1:6]] == ["1", "2", "3", "4", "5"]


def test_random_variant_sizes() -> None:
    env = gem_core.make("game:Minesweeper-v0-random")
    for seed in range(20):
        env.reset(seed=seed)
        p = env.params
        assert 5 <= p.rows <= 8 and 5 <= p.cols <= 8 and p.mines == round(0.19 * p.rows * p.cols)
        assert p.max_turns == p.rows * p.cols


def test_too_many_mines_is_a_config_error() -> None:
    with pytest.raises(gem_core.errors.ConfigError, match="mines"):
        MinesweeperEnv(rows=4, cols=4, mines=10)
