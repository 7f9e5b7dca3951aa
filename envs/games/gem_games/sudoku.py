"""Sudoku: fill the empty cells of a seeded puzzle with a unique solution.

Rules and rewards follow GEM's ``game:Sudoku-v0-*``: each correct placement earns
``1 / #empty cells`` (so a solved grid sums to exactly 1), a digit that breaks a rule or
is not the solution's digit is rejected (reward 0, the turn is spent), and the episode is
truncated after ``max_turns`` turns.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field, model_validator

from gem_games._base import REWARD_SUCCESS, GameConfig, GameEnv, Outcome

__all__ = ["SudokuBoard", "SudokuConfig", "SudokuEnv", "count_solutions", "generate_puzzle", "solve"]

_INT = re.compile(r"\d+")


def _box_size(scale: int) -> int:
    box = math.isqrt(scale)
    if box * box != scale or scale < 4:
        raise ValueError(f"scale must be a square number >= 4 (4 or 9), got {scale}")
    return box


def _candidates(grid: list[list[int]], row: int, col: int, box: int) -> set[int]:
    """Digits that may go in ``(row, col)`` without breaking a row, column or box rule."""
    scale = len(grid)
    used = set(grid[row]) | {grid[r][col] for r in range(scale)}
    r0, c0 = row - row % box, col - col % box
    used |= {grid[r][c] for r in range(r0, r0 + box) for c in range(c0, c0 + box)}
    return set(range(1, scale + 1)) - used


def _search(grid: list[list[int]], limit: int, keep_first: bool) -> tuple[int, list[list[int]] | None]:
    """Backtracking over bitmasks: count completions up to ``limit`` and keep the first one."""
    scale = len(grid)
    box = _box_size(scale)
    full = (1 << (scale + 1)) - 2  # bits 1..scale
    rows, cols, boxes = [0] * scale, [0] * scale, [0] * scale
    empty: list[tuple[int, int, int]] = []
    for r in range(scale):
        for c in range(scale):
            b = (r // box) * box + c // box
            v = grid[r][c]
            if v:
                rows[r] |= 1 << v
                cols[c] |= 1 << v
                boxes[b] |= 1 << v
            else:
                empty.append((r, c, b))
    work = [row[:] for row in grid]
    found: list[list[list[int]]] = []

    def recurse(remaining: list[tuple[int, int, int]]) -> int:
        if not remaining:
            if keep_first and not found:
                found.append([row[:] for row in work])
            return 1
        # Most-constrained cell first keeps the search tiny even for 9x9.
        best_i, best_mask, best_n = -1, 0, scale + 1
        for i, (r, c, b) in enumerate(remaining):
            mask = full & ~(rows[r] | cols[c] | boxes[b])
            n = mask.bit_count()
            if n < best_n:
                best_i, best_mask, best_n = i, mask, n
                if n <= 1:
                    break
        if best_n == 0:
            return 0
        r, c, b = remaining[best_i]
        rest = remaining[:best_i] + remaining[best_i + 1 :]
        total = 0
        mask = best_mask
        while mask and total < limit:
            bit = mask & -mask
            mask ^= bit
            rows[r] |= bit
            cols[c] |= bit
            boxes[b] |= bit
            work[r][c] = bit.bit_length() - 1
            total += recurse(rest)
            rows[r] ^= bit
            cols[c] ^= bit
            boxes[b] ^= bit
            work[r][c] = 0
        return total

    count = recurse(empty)
    return count, (found[0] if found else None)


def count_solutions(grid: list[list[int]], limit: int = 2) -> int:
    """Count completions of ``grid`` (0 = empty) up to ``limit``; the grid is left unchanged."""
    return _search(grid, limit, keep_first=False)[0]


def solve(grid: list[list[int]]) -> list[list[int]] | None:
    """Return a completed copy of ``grid`` (0 = empty), or ``None`` if it has no solution."""
    return _search(grid, 1, keep_first=True)[1]


def _random_solution(scale: int, rng: random.Random) -> list[list[int]]:
    """A uniformly shuffled valid grid: a base pattern with digits, rows and columns permuted."""
    box = _box_size(scale)

    def pattern(r: int, c: int) -> int:
        return (box * (r % box) + r // box + c) % scale

    def shuffled_axis() -> list[int]:
        bands = rng.sample(range(box), box)
        return [b * box + i for b in bands for i in rng.sample(range(box), box)]

    digits = rng.sample(range(1, scale + 1), scale)
    rows, cols = shuffled_axis(), shuffled_axis()
    return [[digits[pattern(r, c)] for c in cols] for r in rows]


def generate_puzzle(scale: int, clues: int, rng: random.Random) -> tuple[list[list[int]], list[list[int]]]:
    """Make ``(puzzle, solution)`` with a unique solution and about ``clues`` given digits.

    Cells are emptied in random order and a removal that would allow a second solution is
    undone, so the puzzle keeps more than ``clues`` digits when uniqueness demands it.
    """
    solution = _random_solution(scale, rng)
    puzzle = [row[:] for row in solution]
    cells = [(r, c) for r in range(scale) for c in range(scale)]
    rng.shuffle(cells)
    filled = scale * scale
    for r, c in cells:
        if filled <= clues:
            break
        digit, puzzle[r][c] = puzzle[r][c], 0
        if count_solutions(puzzle) == 1:
            filled -= 1
        else:
            puzzle[r][c] = digit
    return puzzle, solution


@dataclass
class SudokuBoard:
    """The state of one Sudoku game: givens, the player's digits and the solution."""

    puzzle: list[list[int]]
    solution: list[list[int]]
    grid: list[list[int]] = field(init=False)

    def __post_init__(self) -> None:
        self.grid = [row[:] for row in self.puzzle]

    @property
    def scale(self) -> int:
        return len(self.puzzle)

    @property
    def num_empty_at_start(self) -> int:
        return sum(v == 0 for row in self.puzzle for v in row)

    @property
    def solved(self) -> bool:
        return self.grid == self.solution

    def render(self) -> str:
        """The grid with 1-based row/column numbers, box separators and ``.`` for empty cells."""
        scale, box = self.scale, _box_size(self.scale)
        width = len(str(scale))

        def cell(v: int) -> str:
            return (str(v) if v else ".").rjust(width)

        def cells_line(values: list[str]) -> str:
            groups = [" ".join(values[i : i + box]) for i in range(0, scale, box)]
            return "| " + " | ".join(groups) + " |"

        numbers = [str(c + 1).rjust(width) for c in range(scale)]
        header = "     " + "   ".join(" ".join(numbers[i : i + box]) for i in range(0, scale, box))
        rule = "   +" + "+".join("-" * (box * (width + 1) + 1) for _ in range(box)) + "+"
        lines = [header, rule]
        for r, row in enumerate(self.grid):
            lines.append(f"{str(r + 1).rjust(2)} " + cells_line([cell(v) for v in row]))
            if (r + 1) % box == 0:
                lines.append(rule)
        return "\n".join(lines)

    @staticmethod
    def parse(content: str) -> tuple[int, int, int] | None:
        """Read ``row col digit`` (1-based, any separators) from the boxed text, else ``None``."""
        numbers = _INT.findall(content)
        if len(numbers) != 3 or any(len(n) > 3 for n in numbers):
            return None
        row, col, digit = (int(n) for n in numbers)
        return row, col, digit

    def place(self, row: int, col: int, digit: int) -> tuple[bool, str]:
        """Try to write ``digit`` at 1-based ``(row, col)``; returns ``(accepted, feedback)``."""
        scale = self.scale
        if not (1 <= row <= scale and 1 <= col <= scale):
            return False, f"Row and column must be between 1 and {scale}; ({row}, {col}) is off the board."
        if not 1 <= digit <= scale:
            return False, f"Digits go from 1 to {scale}; {digit} is not allowed."
        r, c = row - 1, col - 1
        if self.puzzle[r][c]:
            return False, f"Cell ({row}, {col}) is a given clue ({self.puzzle[r][c]}) and cannot be changed."
        if self.grid[r][c]:
            return False, f"Cell ({row}, {col}) is already filled with {self.grid[r][c]}."
        box = _box_size(scale)
        if digit not in _candidates(self.grid, r, c, box):
            return False, f"{digit} at ({row}, {col}) repeats a digit in its row, column or box."
        if digit != self.solution[r][c]:
            return False, f"{digit} at ({row}, {col}) breaks no rule yet, but it is not this puzzle's digit there."
        self.grid[r][c] = digit
        return True, f"Placed {digit} at ({row}, {col})."


class SudokuConfig(GameConfig):
    """Configuration of :class:`SudokuEnv`.

    Attributes:
        scale: Side of the grid: 4 (2x2 boxes) or 9 (3x3 boxes).
        clues: Given digits; more are kept when fewer would allow a second solution.
        max_turns: Placements allowed.
        randomize: Draw ``scale`` from {4, 9}, ``clues`` from 8..12 (4x4) or 36..56 (9x9) and
            ``max_turns = 2 * empty cells`` at every reset.
    """

    scale: Literal[4, 9] = 4
    clues: int = Field(10, ge=0, le=81)
    max_turns: int = Field(15, ge=1, le=10_000)

    @model_validator(mode="after")
    def _check_clues(self) -> SudokuConfig:
        if self.clues >= self.scale * self.scale:
            raise ValueError(f"clues ({self.clues}) must leave at least one of the {self.scale**2} cells empty")
        return self


class SudokuEnv(GameEnv[SudokuConfig]):
    """Fill a seeded Sudoku with a unique solution, one digit per turn.

    Rewards: ``1 / #empty cells`` per correct placement, so solving sums to exactly 1.0 (terminated,
    success). A placement on a clue or filled cell, off the board, breaking a rule, or differing from
    the solution is rejected: reward 0 and the turn is spent. A box that is not three numbers is a
    format error. Running out of turns truncates the episode with what was earned.
    """

    config_model = SudokuConfig
    title = "Sudoku"

    def _draw_config(self) -> SudokuConfig:
        scale = 4 if self.py_random.random() < 0.5 else 9
        clues = self.py_random.randint(8, 12) if scale == 4 else self.py_random.randint(36, 56)
        return self.config.model_copy(update={"scale": scale, "clues": clues, "max_turns": 2 * (scale * scale - clues)})

    def _new_game(self) -> None:
        puzzle, solution = generate_puzzle(self.params.scale, self.params.clues, self.py_random)
        self.board = SudokuBoard(puzzle, solution)

    def rules(self) -> str:
        n = self.params.scale
        box = _box_size(n)
        return (
            f"Fill the {n}x{n} grid so that every row, every column and every {box}x{box} box holds each digit "
            f"from 1 to {n} exactly once. Empty cells are shown as '.'; rows and columns are numbered from 1. "
            "Place one digit per turn; the puzzle has exactly one solution."
        )

    def move_format(self) -> tuple[str, str]:
        # A fixed example: one built from the board could give a cell's answer away.
        return "'row column digit' (so '2 3 4' puts a 4 in row 2, column 3)", "2 3 4"

    def render(self) -> str:
        empty = sum(v == 0 for row in self.board.grid for v in row)
        return f"{self.board.render()}\nEmpty cells left: {empty}."

    def _play(self, content: str) -> Outcome:
        move = SudokuBoard.parse(content)
        if move is None:
            return Outcome(f"{content[:40]!r} is not 'row column digit' (three whole numbers).", status="format_error")
        row, col, digit = move
        parsed = f"{row} {col} {digit}"
        accepted, feedback = self.board.place(row, col, digit)
        if not accepted:
            return Outcome(f"{feedback} That turn is lost.", parsed=parsed, invalid=True)
        if self.board.solved:
            return Outcome(f"{feedback} The grid is complete.", self._share(), "won", parsed=parsed)
        return Outcome(feedback, self._share(), parsed=parsed)

    def _share(self) -> float:
        # The last placement takes whatever is left of 1.0 so a solved grid sums to exactly REWARD_SUCCESS.
        empty_at_start = self.board.num_empty_at_start
        empty_now = sum(v == 0 for row in self.board.grid for v in row)
        if empty_now == 0:
            return REWARD_SUCCESS - (empty_at_start - 1) * (REWARD_SUCCESS / empty_at_start)
        return REWARD_SUCCESS / empty_at_start

    def expert_moves(self) -> list[str]:
        """The solver's placements for the remaining empty cells, as boxed answers (the scripted expert)."""
        solved = solve(self.board.grid)
        assert solved is not None, "the board only ever holds the solution's digits"
        n = self.board.scale
        return [
            f"\\boxed{{{r + 1} {c + 1} {solved[r][c]}}}"
            for r in range(n)
            for c in range(n)
            if not self.board.grid[r][c]
        ]

    def expert_action(self) -> str:
        """The solver's next placement (see :meth:`expert_moves`)."""
        return self.expert_moves()[0]

    def sample_random_action(self) -> str:
        n = self.params.scale
        r, c, d = (self.py_random.randint(1, n) for _ in range(3))
        return f"\\boxed{{{r} {c} {d}}}"
