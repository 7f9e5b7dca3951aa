"""Minesweeper: reveal every safe cell of a grid without touching a mine.

Boards are generated so that logic alone solves them: the opening cell (revealed at reset) has no
mine around it, and the generator keeps a board only if :func:`deduce` can finish it from there
without guessing (it retries a bounded number of times, then keeps the last board).
"""

from __future__ import annotations

import functools
import re
from typing import ClassVar

from pydantic import Field, model_validator

from gem_games._base import GameConfig, GameEnv, Outcome

__all__ = ["MinesweeperConfig", "MinesweeperEnv", "deduce"]

Cell = tuple[int, int]
HIDDEN = -1
_MOVE = re.compile(
    r"(?:(?P<verb>reveal|open|click|r|flag|f|unflag|mark)\s*[:\s]?\s*)?"
    r"[(\[]?\s*(?:row\s*)?(?P<row>\d{1,3})\s*[,;\s]\s*(?:col(?:umn)?\s*)?(?P<col>\d{1,3})\s*[)\]]?"
)
#: Boards tried before keeping one that logic alone cannot finish.
_GENERATION_TRIES = 60


@functools.cache
def _neighbour_table(rows: int, cols: int) -> tuple[tuple[Cell, ...], ...]:
    return tuple(
        tuple(
            (r + dr, c + dc)
            for dr in (-1, 0, 1)
            for dc in (-1, 0, 1)
            if (dr or dc) and 0 <= r + dr < rows and 0 <= c + dc < cols
        )
        for r in range(rows)
        for c in range(cols)
    )


@functools.cache
def _neighbour_masks(rows: int, cols: int) -> tuple[int, ...]:
    """Per cell index ``r * cols + c``, the bit mask of its neighbours' indices."""
    return tuple(sum(1 << (r * cols + c) for r, c in cells) for cells in _neighbour_table(rows, cols))


def neighbours(cell: Cell, rows: int, cols: int) -> tuple[Cell, ...]:
    """The up to eight cells around ``cell`` (precomputed per board size)."""
    return _neighbour_table(rows, cols)[cell[0] * cols + cell[1]]


def deduce(
    view: list[list[int]], mines_total: int, known_mines: set[Cell] | None = None
) -> tuple[set[Cell], set[Cell]]:
    """Cells that are certainly safe and certainly mines, from what a player sees.

    Uses each number's constraint, the subset rule between pairs of constraints, and the total mine
    count. Sound, not complete: ``(set(), set())`` means no cell is certain by these rules. Cell sets
    are bit masks inside, which keeps board generation (it runs this solver) fast.

    Args:
        view: ``view[r][c]`` is the number of a revealed cell or :data:`HIDDEN`.
        mines_total: Mines on the board.
        known_mines: Hidden cells already known to be mines.

    Returns:
        ``(safe, mines)``, both among the hidden cells; ``mines`` includes ``known_mines``.
    """
    rows, cols = len(view), len(view[0])
    around_of = _neighbour_masks(rows, cols)
    flat = [v for row in view for v in row]
    hidden = sum(1 << i for i, v in enumerate(flat) if v == HIDDEN)
    mines = sum(1 << (r * cols + c) for r, c in known_mines or ())
    numbered = [(around_of[i] & hidden, v) for i, v in enumerate(flat) if v > 0 and around_of[i] & hidden]
    safe = 0
    while True:
        constraints: set[tuple[int, int]] = set()
        for around, number in numbered:
            around &= ~safe
            unknown = around & ~mines
            if unknown:
                constraints.add((unknown, number - (around & mines).bit_count()))
        unknown_all = hidden & ~safe & ~mines
        if unknown_all:
            constraints.add((unknown_all, mines_total - mines.bit_count()))
        found_safe = found_mines = 0
        for cells, count in constraints:
            if count == 0:
                found_safe |= cells
            elif count == cells.bit_count():
                found_mines |= cells
        if not (found_safe or found_mines):
            for a_cells, a_count in constraints:
                for b_cells, b_count in constraints:
                    if a_cells != b_cells and a_cells & ~b_cells == 0:  # a is a proper subset of b
                        rest, rest_count = b_cells & ~a_cells, b_count - a_count
                        if rest_count == 0:
                            found_safe |= rest
                        elif rest_count == rest.bit_count():
                            found_mines |= rest
        if not (found_safe & ~safe or found_mines & ~mines):
            break
        safe |= found_safe
        mines |= found_mines
    return _cells(safe, cols), _cells(mines, cols)


def _cells(mask: int, cols: int) -> set[Cell]:
    cells = set()
    while mask:
        low = mask & -mask
        cells.add(divmod(low.bit_length() - 1, cols))
        mask ^= low
    return cells


class MinesweeperConfig(GameConfig):
    """Configuration of :class:`MinesweeperEnv`.

    Attributes:
        rows: Grid height (3 to 16).
        cols: Grid width (3 to 16).
        mines: Mines on the grid; at most ``rows * cols - 9`` (the opening keeps a 3x3 area clear).
            GEM's name ``num_mines`` is accepted too.
        max_turns: Moves allowed (reveals and flags).
        randomize: Draw ``rows`` and ``cols`` from 5..8, ``mines = round(0.19 * rows * cols)`` and
            ``max_turns = rows * cols`` at every reset.
    """

    gem_aliases: ClassVar[dict[str, str]] = {"num_mines": "mines"}

    rows: int = Field(8, ge=3, le=16)
    cols: int = Field(8, ge=3, le=16)
    mines: int = Field(12, ge=1)
    max_turns: int = Field(64, ge=1, le=10_000)

    @model_validator(mode="after")
    def _check_mines(self) -> MinesweeperConfig:
        if self.mines > self.rows * self.cols - 9:
            raise ValueError(f"mines ({self.mines}) must be at most rows * cols - 9 = {self.rows * self.cols - 9}")
        return self


class MinesweeperEnv(GameEnv[MinesweeperConfig]):
    """Reveal every cell without a mine. A revealed number counts the mines among its eight neighbours.

    The game starts with an opening already revealed. Rewards: each reveal earns
    ``newly_revealed_cells / cells_to_reveal`` (the safe cells hidden at the start), so clearing the board
    sums to 1; revealing a mine ends the game with reward 0. Flags cost a turn and earn nothing; revealing
    an already revealed or a flagged cell, or a cell outside the grid, is an invalid move.
    """

    config_model = MinesweeperConfig
    title = "Minesweeper"

    def _draw_config(self) -> MinesweeperConfig:
        rows, cols = (int(x) for x in self.np_random.integers(5, 9, size=2))
        cells = rows * cols
        return self.config.model_copy(
            update={"rows": rows, "cols": cols, "mines": round(0.19 * cells), "max_turns": cells}
        )

    def _new_game(self) -> None:
        p = self.params
        for _ in range(_GENERATION_TRIES):
            self._lay_mines()
            if self._solvable_by_logic():
                break
        self.view = [[HIDDEN] * p.cols for _ in range(p.rows)]
        self.flags: set[Cell] = set()
        self._reveal(self.start)
        if self.revealed_count == p.rows * p.cols - p.mines:  # tiny boards: leave the player something to do
            self.view = [[HIDDEN] * p.cols for _ in range(p.rows)]
            self.view[self.start[0]][self.start[1]] = 0
        #: Safe cells hidden after the opening: the denominator of the reveal reward.
        self.to_reveal = p.rows * p.cols - p.mines - self.revealed_count
        self.exploded: Cell | None = None

    def _lay_mines(self) -> None:
        p = self.params
        self.start: Cell = (int(self.np_random.integers(p.rows)), int(self.np_random.integers(p.cols)))
        clear = {self.start, *neighbours(self.start, p.rows, p.cols)}
        candidates = [(r, c) for r in range(p.rows) for c in range(p.cols) if (r, c) not in clear]
        picks = self.np_random.choice(len(candidates), size=p.mines, replace=False)
        self.mines = {candidates[int(i)] for i in picks}
        self.counts = [
            [sum(n in self.mines for n in neighbours((r, c), p.rows, p.cols)) for c in range(p.cols)]
            for r in range(p.rows)
        ]

    def _solvable_by_logic(self) -> bool:
        """Whether :func:`deduce` clears the board from the opening (and the opening leaves work to do)."""
        p = self.params
        self.view = [[HIDDEN] * p.cols for _ in range(p.rows)]
        self._reveal(self.start)
        if self.revealed_count == p.rows * p.cols - p.mines:
            return False
        known: set[Cell] = set()
        while self.revealed_count < p.rows * p.cols - p.mines:
            safe, known = deduce(self.view, p.mines, known)
            if not safe:
                return False
            for cell in safe:
                self._reveal(cell)
        return True

    def _reveal(self, cell: Cell) -> int:
        """Reveal ``cell`` (a safe one) and flood the area around zeros; returns cells newly revealed."""
        p = self.params
        stack, count = [cell], 0
        while stack:
            r, c = stack.pop()
            if self.view[r][c] != HIDDEN:
                continue
            self.view[r][c] = self.counts[r][c]
            count += 1
            if self.counts[r][c] == 0:
                stack.extend(n for n in neighbours((r, c), p.rows, p.cols) if self.view[n[0]][n[1]] == HIDDEN)
        return count

    @property
    def revealed_count(self) -> int:
        """Cells revealed so far."""
        return sum(v != HIDDEN for row in self.view for v in row)

    def rules(self) -> str:
        p = self.params
        return (
            f"The {p.rows}x{p.cols} grid hides {p.mines} mines. Reveal every cell that has no mine. A revealed "
            "number tells how many of its eight neighbours are mines; revealing a mine loses the game. "
            "Rows and columns are numbered from 1, and an opening is already revealed. "
            "You may also flag a cell you believe is a mine (for your own bookkeeping)."
        )

    def move_format(self) -> tuple[str, str]:
        return "'reveal ROW COL' or 'flag ROW COL'", "reveal 2 3"

    def render(self) -> str:
        p = self.params
        width = len(str(p.cols))
        header = " " * 4 + " ".join(f"{c + 1:>{width}}" for c in range(p.cols))
        lines = [header]
        for r in range(p.rows):
            cells = []
            for c in range(p.cols):
                value = self.view[r][c]
                if (r, c) == self.exploded:
                    symbol = "X"
                elif value != HIDDEN:
                    symbol = str(value) if value else "."
                elif (r, c) in self.flags:
                    symbol = "F"
                elif self._done and (r, c) in self.mines:
                    symbol = "*"
                else:
                    symbol = "#"
                cells.append(f"{symbol:>{width}}")
            lines.append(f"{r + 1:>2}  " + " ".join(cells))
        legend = "# = hidden, . = no mine around, digits = mines around, F = flag"
        if self._done:
            legend += ", * = mine" + (", X = the mine you hit" if self.exploded else "")
        left = p.rows * p.cols - p.mines - self.revealed_count
        return "\n".join(lines) + f"\n({legend}; {left} safe cell{'s' if left != 1 else ''} left to reveal)"

    def _play(self, content: str) -> Outcome:
        match = _MOVE.fullmatch(content.strip().lower())
        if match is None:
            return Outcome(f"{content[:40]!r} is not a move like 'reveal 2 3'.", status="format_error")
        verb = match["verb"] or "reveal"
        flag = verb in ("flag", "f", "mark", "unflag")
        row, col = int(match["row"]), int(match["col"])
        shown = f"{'flag' if flag else 'reveal'} {row} {col}"
        p = self.params
        if not (1 <= row <= p.rows and 1 <= col <= p.cols):
            where = f"rows and columns go from 1 to {p.rows} and 1 to {p.cols}"
            return Outcome(f"({row}, {col}) is outside the grid: {where}.", parsed=shown, invalid=True)
        cell = (row - 1, col - 1)
        if self.view[cell[0]][cell[1]] != HIDDEN:
            return Outcome(f"({row}, {col}) is already revealed.", parsed=shown, invalid=True)
        if flag:
            if cell in self.flags or verb == "unflag":
                self.flags.discard(cell)
                return Outcome(f"Flag removed from ({row}, {col}).", parsed=shown)
            self.flags.add(cell)
            return Outcome(f"Flagged ({row}, {col}).", parsed=shown)
        if cell in self.flags:
            return Outcome(f"({row}, {col}) is flagged; unflag it before revealing it.", parsed=shown, invalid=True)
        if cell in self.mines:
            self.exploded = cell
            return Outcome(f"Boom! ({row}, {col}) was a mine.", 0.0, "lost", shown)
        newly = self._reveal(cell)
        reward = newly / self.to_reveal
        if self.revealed_count == p.rows * p.cols - p.mines:
            return Outcome(f"({row}, {col}) revealed the last safe cell.", reward, "won", shown)
        return Outcome(f"Revealed {newly} cell{'s' if newly > 1 else ''} from ({row}, {col}).", reward, parsed=shown)

    def expert_action(self) -> str:
        """Reveal a cell the visible numbers prove safe; guess the first unknown cell only if none is."""
        safe, mines = deduce(self.view, self.params.mines)
        if safe:
            row, col = min(safe)
        else:
            row, col = next(
                (r, c)
                for r in range(self.params.rows)
                for c in range(self.params.cols)
                if self.view[r][c] == HIDDEN and (r, c) not in mines
            )
        return f"\\boxed{{reveal {row + 1} {col + 1}}}"

    def sample_random_action(self) -> str:
        p = self.params
        return f"\\boxed{{reveal {self.py_random.randint(1, p.rows)} {self.py_random.randint(1, p.cols)}}}"
