"""The rendered Sudoku plays exactly as game:Sudoku: same moves, same rewards, the board as a picture."""

from __future__ import annotations

import io

from gem_core.multimodal import Content
from gem_games.sudoku import SudokuEnv
from PIL import Image as PILImage

from gem_vision.sudoku import VisualSudokuEnv

CONFIG = {"scale": 4, "clues": 8, "max_turns": 30}


def test_same_rewards_as_the_text_game_for_expert_and_random_moves() -> None:
    for seed in range(4):
        text, picture = SudokuEnv(**CONFIG), VisualSudokuEnv(**CONFIG)
        text.reset(seed=seed)
        obs, _ = picture.reset(seed=seed)
        assert isinstance(obs, Content) and len(obs.images) == 1
        moves = [picture.sample_random_action() if i % 3 == 2 else picture.expert_action() for i in range(30)]
        for move in moves:
            a = text.step(move)
            b = picture.step(move)
            assert a[1:4] == b[1:4]
            assert isinstance(b[0], Content) and len(b[0].images) == 1
            if a[2] or a[3]:
                break


def test_the_picture_changes_with_the_board_and_decodes() -> None:
    env = VisualSudokuEnv(**CONFIG)
    first, _ = env.reset(seed=7)
    after, reward, *_ = env.step(env.expert_action())
    assert reward > 0
    assert first.images[0] != after.images[0]
    with PILImage.open(io.BytesIO(after.images[0].read())) as decoded:
        assert decoded.size == after.images[0].size


def test_the_board_text_is_not_in_the_observation() -> None:
    env = VisualSudokuEnv(**CONFIG)
    obs, _ = env.reset(seed=1)
    assert "|" not in obs.text and "+--" not in obs.text  # the grid is drawn, not typed
