"""FifteenPuzzle: slide numbered tiles into order on an N x N board with one empty space."""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
from typing import ClassVar

from pydantic import Field, model_validator

from gem_games._base import REWARD_SUCCESS, GameConfig, GameEnv, Outcome, normalize

__all__ = ["FifteenPuzzleConfig", "FifteenPuzzleEnv", "solve"]

Board = tuple[int, ...]  # row-major, 0 is the empty space
#: Where the empty space moves when a tile slides in a direction: sliding "up" pulls the tile below it up.
_BLANK_STEP = {"up": (1, 0), "down": (-1, 0), "left": (0, 1), "right": (0, -1)}
_ALIASES = {"u": "up", "d": "down", "l": "left", "r": "right"}


def goal_board(size: int) -> Board:
    """``1, 2, ..., size*size - 1`` then the empty space."""
    return (*range(1, size * size), 0)


def slide(board: Board, size: int, direction: str) -> Board | None:
    """The board after sliding a tile ``direction`` into the empty space, or ``None`` if no tile can."""
    blank = board.index(0)
    dr, dc = _BLANK_STEP[direction]
    r, c = divmod(blank, size)
    nr, nc = r + dr, c + dc
    if not (0 <= nr < size and 0 <= nc < size):
        return None
    tile = nr * size + nc
    cells = list(board)
    cells[blank], cells[tile] = cells[tile], 0
    return tuple(cells)


@functools.cache
def _blank_neighbours(size: int) -> tuple[tuple[int, ...], ...]:
    """Per position of the empty space, the positions it can swap with."""
    table = []
    for index in range(size * size):
        r, c = divmod(index, size)
        table.append(
            tuple(
                nr * size + nc
                for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1))
                if 0 <= nr < size and 0 <= nc < size
            )
        )
    return tuple(table)


@functools.cache
def _manhattan_table(size: int) -> tuple[tuple[int, ...], ...]:
    """``table[tile][index]``: distance of ``tile`` at ``index`` from its goal square (0 for the space)."""
    n = size * size
    rows = [(0,) * n]
    for tile in range(1, n):
        gr, gc = divmod(tile - 1, size)
        rows.append(tuple(abs(i // size - gr) + abs(i % size - gc) for i in range(n)))
    return tuple(rows)


def _line_penalty(goals: list[int]) -> int:
    """Two moves per tile that must leave its goal line to let the others pass: ``2 * (len - LIS)``."""
    if len(goals) < 2:
        return 0
    tails: list[int] = []  # patience sorting: tails[k] is the smallest end of an increasing run of length k+1
    for goal in goals:
        k = bisect.bisect_left(tails, goal)
        tails[k : k + 1] = [goal]
    return 2 * (len(goals) - len(tails))


def _heuristic(board: Board, size: int) -> int:
    """Manhattan distance plus linear conflicts, counted so that it stays admissible."""
    table = _manhattan_table(size)
    total = sum(table[tile][index] for index, tile in enumerate(board))
    for line in range(size):
        row = board[line * size : (line + 1) * size]
        col = board[line::size]
        total += _line_penalty([(t - 1) % size for t in row if t and (t - 1) // size == line])
        total += _line_penalty([(t - 1) // size for t in col if t and (t - 1) % size == line])
    return total


def solve(board: Board, size: int, *, weight: float = 1.0, max_nodes: int = 2_000_000) -> list[str] | None:
    """Directions that solve ``board``, by (weighted) A*; optimal when ``weight`` is 1.

    Args:
        board: Row-major tiles, 0 for the empty space.
        size: Side of the board.
        weight: Weight of the heuristic; above 1 trades optimality for speed.
        max_nodes: Give up after expanding this many boards.

    Returns:
        The moves (``up``/``down``/``left``/``right``, tile directions), or ``None`` when the search gave up.
    """
    goal = goal_board(size)
    counter = itertools.count()
    frontier = [(weight * _heuristic(board, size), next(counter), 0, board)]
    parents: dict[Board, tuple[Board, str] | None] = {board: None}
    cost = {board: 0}
    expanded = 0
    while frontier and expanded < max_nodes:
        _, _, g, current = heapq.heappop(frontier)
        if current == goal:
            moves: list[str] = []
            while (link := parents[current]) is not None:
                current, move = link
                moves.append(move)
            return moves[::-1]
        if g > cost[current]:
            continue
        expanded += 1
        for direction in _BLANK_STEP:
            nxt = slide(current, size, direction)
            if nxt is not None and g + 1 < cost.get(nxt, 1 << 30):
                cost[nxt] = g + 1
                parents[nxt] = (current, direction)
                heapq.heappush(frontier, (g + 1 + weight * _heuristic(nxt, size), next(counter), g + 1, nxt))
    return None


class FifteenPuzzleConfig(GameConfig):
    """Configuration of :class:`FifteenPuzzleEnv`.

    Attributes:
        size: Side of the board (2 to 5); 4 is the classic fifteen puzzle. GEM's ``num_rows`` is accepted too.
        scramble_moves: Random slides applied to the solved board (never undoing the previous one, except
            on the 2x2 board where that would always give the same puzzle), so every puzzle is solvable in at
            most this many moves.
        max_turns: Moves allowed; at least ``scramble_moves`` keeps every puzzle solvable in time.
        randomize: Draw ``size`` from 2..4 at every reset, with the easy / medium / hard settings of that size
            (2: 100 scrambles, 10 turns; 3: 30 and 40; 4: 40 and 50).
    """

    gem_aliases: ClassVar[dict[str, str]] = {"num_rows": "size"}

    size: int = Field(4, ge=2, le=5)
    scramble_moves: int = Field(40, ge=1, le=10_000)
    max_turns: int = Field(50, ge=1, le=10_000)

    @model_validator(mode="after")
    def _check_turns(self) -> FifteenPuzzleConfig:
        if self.size > 2 and self.max_turns < self.scramble_moves:
            raise ValueError(
                f"max_turns ({self.max_turns}) must be at least scramble_moves ({self.scramble_moves}), "
                "or some puzzles cannot be solved in time"
            )
        return self


#: Per size: (scramble_moves, max_turns) of the randomize variant.
_RANDOM_SETTINGS = {2: (100, 10), 3: (30, 40), 4: (40, 50)}


class FifteenPuzzleEnv(GameEnv[FifteenPuzzleConfig]):
    """Put the tiles in order (1, 2, 3, ... row by row, the empty space last) by sliding them.

    A move names the direction a tile slides into the empty space (``up`` moves the tile below the
    space up), or the number of a tile next to the space. Rewards: 1.0 when solved; when the turns run
    out, the fraction of tiles in their place. A move that no tile can make is an invalid move.
    """

    config_model = FifteenPuzzleConfig
    title = "Fifteen Puzzle"

    def _draw_config(self) -> FifteenPuzzleConfig:
        size = int(self.np_random.integers(2, 5))
        scramble, turns = _RANDOM_SETTINGS[size]
        return self.config.model_copy(update={"size": size, "scramble_moves": scramble, "max_turns": turns})

    def _new_game(self) -> None:
        size = self.params.size
        board = goal_board(size)
        # On 2x2 an even walk only reaches half the boards; an optional extra slide reaches the rest.
        steps = self.params.scramble_moves + (int(self.np_random.integers(2)) if size == 2 else 0)
        while board == goal_board(size):
            cells, blank, previous = list(goal_board(size)), size * size - 1, -1
            for draw in self.np_random.random(steps).tolist():
                options = [j for j in _blank_neighbours(size)[blank] if j != previous or size == 2]
                target = options[int(draw * len(options))]
                cells[blank], cells[target] = cells[target], 0
                previous, blank = blank, target
            board = tuple(cells)
        self.board: Board = board
        self._plan: list[str] = []  # expert_action's remaining moves, valid while the board is _plan_board
        self._plan_board: Board | None = None

    def rules(self) -> str:
        n = self.params.size
        last = n * n - 1
        return (
            f"Slide the tiles of this {n}x{n} board until they read 1 to {last} row by row, with the empty "
            "space (_) in the bottom-right corner. A move slides one tile next to the space into it: name the "
            "direction the tile moves (up, down, left, right; 'up' moves the tile below the space up) "
            "or the tile's number."
        )

    def move_format(self) -> tuple[str, str]:
        return "a direction (up, down, left, right) or the number of a tile next to the space", "up"

    def render(self) -> str:
        n = self.params.size
        width = len(str(n * n - 1))
        rows = []
        for r in range(n):
            tiles = self.board[r * n : (r + 1) * n]
            rows.append(" ".join(f"{t:>{width}}" if t else "_".rjust(width) for t in tiles))
        return "Board:\n" + "\n".join(rows)

    def _direction_of_tile(self, tile: int) -> str | None:
        n = self.params.size
        if tile not in self.board or tile == 0:
            return None
        for direction in _BLANK_STEP:
            nxt = slide(self.board, n, direction)
            if nxt is not None and nxt.index(0) == self.board.index(tile):
                return direction
        return None

    def _play(self, content: str) -> Outcome:
        move = normalize(content).strip(".!")
        move = _ALIASES.get(move, move)
        if move.isdigit() and len(move) <= 3:
            direction = self._direction_of_tile(int(move))
            if direction is None:
                return Outcome(f"Tile {move} is not next to the empty space.", parsed=move, invalid=True)
            move = direction
        if move not in _BLANK_STEP:
            return Outcome(f"{content[:40]!r} is not a direction or a tile number.", status="format_error")
        nxt = slide(self.board, self.params.size, move)
        if nxt is None:
            return Outcome(f"No tile can slide {move}.", parsed=move, invalid=True)
        tile = nxt[self.board.index(0)]
        self.board = nxt
        if self.board == goal_board(self.params.size):
            return Outcome(f"Tile {tile} slid {move}: solved!", REWARD_SUCCESS, "won", move)
        return Outcome(f"Tile {tile} slid {move}.", parsed=move)

    def tiles_in_place(self) -> float:
        """Fraction of the numbered tiles on their goal square."""
        goal = goal_board(self.params.size)
        return sum(t != 0 and t == g for t, g in zip(self.board, goal, strict=True)) / (len(goal) - 1)

    def _on_truncation(self) -> tuple[float, str]:
        share = self.tiles_in_place()
        return share, f"Out of turns with {share:.0%} of the tiles in place."

    def expert_action(self) -> str:
        """The next move of an A* plan (weighted on 4x4 and larger boards, for speed), replanned off the plan."""
        if not self._plan or self._plan_board != self.board:
            weight = 1.3 if self.params.size >= 4 else 1.0
            self._plan = solve(self.board, self.params.size, weight=weight) or []
        if not self._plan:
            return self.sample_random_action()
        move = self._plan.pop(0)
        self._plan_board = slide(self.board, self.params.size, move)
        return f"\\boxed{{{move}}}"

    def sample_random_action(self) -> str:
        return f"\\boxed{{{self.py_random.choice(list(_BLANK_STEP))}}}"
