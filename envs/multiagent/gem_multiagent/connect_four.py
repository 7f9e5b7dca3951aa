"""Connect Four (7 columns, 6 rows) for two agents in turn, and a scripted reference opponent."""

from __future__ import annotations

from typing import Any

from gem_core.multiagent import MultiAgentEnv, MultiResetReturn, MultiStepReturn

from gem_multiagent._base import TwoPlayerGame, last_int

__all__ = ["ConnectFour", "scripted_connect_four"]

ROWS, COLS = 6, 7


class ConnectFour(TwoPlayerGame):
    """Agents ``red`` (first) and ``yellow`` drop discs into columns 1-7; four in a line wins, a full grid draws.

    The move is the last number of the reply; none, a column outside 1-7 or a full column forfeits.
    """

    possible_agents = ("red", "yellow")

    def __init__(self) -> None:
        self.grid = [["." for _ in range(COLS)] for _ in range(ROWS)]  # row 0 is the top

    def render(self) -> str:
        """The grid, top row first, with the column numbers below."""
        return "\n".join(" ".join(row) for row in self.grid) + "\n" + " ".join(str(c + 1) for c in range(COLS))

    def legal_moves(self) -> list[int]:
        """Columns (1-7) with room."""
        return [c + 1 for c in range(COLS) if self.grid[0][c] == "."]

    def drop(self, column: int, mark: str) -> int:
        """Drop ``mark`` into ``column`` (1-7); returns the row it lands in."""
        for row in range(ROWS - 1, -1, -1):
            if self.grid[row][column - 1] == ".":
                self.grid[row][column - 1] = mark
                return row
        raise ValueError(f"column {column} is full")

    def wins(self, row: int, col: int) -> bool:
        """Whether the disc at ``(row, col)`` (0-based) completes four in a line."""
        mark = self.grid[row][col]
        for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
            count = 1
            for sign in (1, -1):
                r, c = row + sign * dr, col + sign * dc
                while 0 <= r < ROWS and 0 <= c < COLS and self.grid[r][c] == mark:
                    count += 1
                    r, c = r + sign * dr, c + sign * dc
            if count >= 4:
                return True
        return False

    def _reset(self, options: dict[str, Any] | None) -> MultiResetReturn:
        self.grid = [["." for _ in range(COLS)] for _ in range(ROWS)]
        self._selection = "red"
        rules = "Connect Four: drop discs into columns 1-7; four in a row (any direction) wins. Answer with a column."
        return {
            "red": f"{rules} You are R and move first.\n{self.render()}\nYour move?",
            "yellow": f"{rules} You are Y and move second.",
        }, {}

    def _turn(self, agent: str, action: str) -> MultiStepReturn:
        move = last_int(action)
        if move is None:
            return self.forfeit(agent, "no column number in the reply", format_error=True)
        if move not in self.legal_moves():
            return self.forfeit(agent, f"column {move} is not open (open: {self.legal_moves()})", format_error=False)
        mark = agent[0].upper()
        row = self.drop(move, mark)
        news = f"{mark} dropped into column {move}.\n{self.render()}"
        if self.wins(row, move - 1):
            return self.finish(agent, f"{news}\n{mark} wins.")
        if not self.legal_moves():
            return self.finish(None, f"{news}\nDraw.")
        other = self.other(agent)
        self._selection = other
        return {agent: news, other: f"{news}\nYour move?"}, {}, {}, {}, {agent: {"parsed_action": str(move)}}

    def sample_random_action(self, agent: str) -> str:
        moves = self.legal_moves() or [1]
        return str(moves[int(self.np_random.integers(len(moves)))])


def scripted_connect_four(env: MultiAgentEnv, agent: str, observation: str) -> str:
    """Reference opponent: win now if it can, else block a win, else the open column nearest the centre."""
    game = env.unwrapped
    assert isinstance(game, ConnectFour)
    me, them = agent[0].upper(), game.other(agent)[0].upper()
    for mark in (me, them):
        for column in game.legal_moves():
            row = game.drop(column, mark)
            won = game.wins(row, column - 1)
            game.grid[row][column - 1] = "."
            if won:
                return str(column)
    return str(min(game.legal_moves(), key=lambda c: (abs(c - 4), c)))
