r"""``game:Sudoku`` with the board shown as a picture: the same rules, moves and rewards, drawn instead of typed.

:class:`VisualSudokuEnv` is gem-games' :class:`~gem_games.sudoku.SudokuEnv` whose board is a
PNG in the observation (a :class:`~gem_core.multimodal.Content`): givens in black, the
player's digits in blue, 1-based row and column numbers on the margins. The text keeps
the rules, the feedback and the move format; actions are text (``\\boxed{row col digit}``).
"""

from __future__ import annotations

from typing import Any

from gem_core.core import ResetReturn, StepReturn
from gem_core.multimodal import Content, Observation
from gem_games.sudoku import SudokuEnv, _box_size

from gem_vision._base import canvas, font, to_image

__all__ = ["VisualSudokuEnv", "draw_board"]

# where the board goes in the parent's text: render() writes it, reset/step swap in the picture
_BOARD = "\x00gem-vision-board\x00"
_CELL = 36
_MARGIN = 28


def draw_board(puzzle: list[list[int]], grid: list[list[int]]) -> Any:
    """The board as a Pillow picture: givens black, placed digits blue, numbered rows and columns."""
    n = len(grid)
    box = _box_size(n)
    side = _MARGIN + n * _CELL + 8
    picture, draw = canvas(side, side)
    for i in range(n):
        draw.text((_MARGIN + (i + 0.5) * _CELL, _MARGIN / 2), str(i + 1), fill="grey", font=font(13), anchor="mm")
        draw.text((_MARGIN / 2, _MARGIN + (i + 0.5) * _CELL), str(i + 1), fill="grey", font=font(13), anchor="mm")
    for i in range(n + 1):
        width = 3 if i % box == 0 else 1
        at = _MARGIN + i * _CELL
        draw.line([(at, _MARGIN), (at, _MARGIN + n * _CELL)], fill="black", width=width)
        draw.line([(_MARGIN, at), (_MARGIN + n * _CELL, at)], fill="black", width=width)
    for r in range(n):
        for c in range(n):
            if grid[r][c]:
                colour = "black" if puzzle[r][c] else "#1f4fbf"
                centre = (_MARGIN + (c + 0.5) * _CELL, _MARGIN + (r + 0.5) * _CELL)
                draw.text(centre, str(grid[r][c]), fill=colour, font=font(20), anchor="mm")
    return picture


class VisualSudokuEnv(SudokuEnv):
    """Sudoku whose board is a picture (``vision:Sudoku-v0-easy``, ``-hard``); see :class:`SudokuEnv`."""

    def rules(self) -> str:
        return super().rules().replace("Empty cells are shown as '.'", "Empty cells are blank") + (
            " The board is the picture: given digits are black, yours are blue."
        )

    def render(self) -> str:
        empty = sum(v == 0 for row in self.board.grid for v in row)
        return f"{_BOARD}\nEmpty cells left: {empty}."

    def _with_picture(self, obs: Observation) -> Observation:
        text = str(obs)
        if _BOARD not in text:
            return obs
        before, after = text.split(_BOARD, 1)
        return Content(before, to_image(draw_board(self.board.puzzle, self.board.grid)), after)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        obs, info = super().reset(seed=seed, options=options)
        return self._with_picture(obs), info

    def step(self, action: str) -> StepReturn:
        obs, reward, terminated, truncated, info = super().step(action)
        return self._with_picture(obs), reward, terminated, truncated, info
