"""TicTacToe for two agents in turn, and its scripted reference opponent."""

from __future__ import annotations

import functools
from typing import Any

from gem_core.multiagent import MultiAgentEnv, MultiResetReturn, MultiStepReturn

from gem_multiagent._base import TwoPlayerGame, last_int

__all__ = ["LINES", "TicTacToe", "scripted_tictactoe", "winner_of"]

#: The eight winning lines, as cell indexes 0..8.
LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def winner_of(board: list[str]) -> str | None:
    """The mark (``"X"``/``"O"``) that fills a line, else ``None``."""
    for a, b, c in LINES:
        if board[a] != " " and board[a] == board[b] == board[c]:
            return board[a]
    return None


class TicTacToe(TwoPlayerGame):
    """Agents ``x`` (moves first) and ``o`` take cells 1-9; three in a line wins (+1, the other -1), a full board draws.

    The move is the last number of the reply. No number, a number outside 1-9 or a taken cell forfeits.
    """

    possible_agents = ("x", "o")

    def __init__(self) -> None:
        self.board = [" "] * 9

    def render(self) -> str:
        """The board, empty cells shown by their number."""
        cells = [c if c != " " else str(i + 1) for i, c in enumerate(self.board)]
        return "\n".join(" | ".join(cells[r * 3 : r * 3 + 3]) for r in range(3))

    def legal_moves(self) -> list[int]:
        """Free cells, numbered 1-9."""
        return [i + 1 for i, c in enumerate(self.board) if c == " "]

    def _reset(self, options: dict[str, Any] | None) -> MultiResetReturn:
        self.board = [" "] * 9
        self._selection = "x"
        rules = "TicTacToe. Cells are numbered 1-9; three in a row wins. Answer with the number of a free cell."
        return {
            "x": f"{rules} You are X and move first.\n{self.render()}\nYour move?",
            "o": f"{rules} You are O and move second.",
        }, {}

    def _turn(self, agent: str, action: str) -> MultiStepReturn:
        move = last_int(action)
        if move is None:
            return self.forfeit(agent, "no cell number in the reply", format_error=True)
        if move not in self.legal_moves():
            return self.forfeit(agent, f"cell {move} is not free (free: {self.legal_moves()})", format_error=False)
        self.board[move - 1] = agent.upper()
        other = self.other(agent)
        news = f"{agent.upper()} took cell {move}.\n{self.render()}"
        if winner_of(self.board):
            return self.finish(agent, f"{news}\n{agent.upper()} wins.")
        if not self.legal_moves():
            return self.finish(None, f"{news}\nDraw.")
        self._selection = other
        return {agent: news, other: f"{news}\nYour move?"}, {}, {}, {}, {agent: {"parsed_action": str(move)}}

    def sample_random_action(self, agent: str) -> str:
        moves = self.legal_moves() or [1]
        return str(moves[int(self.np_random.integers(len(moves)))])


@functools.cache
def _value(board: str, mover: str) -> int:
    """Minimax value of ``board`` (9 chars) for ``mover``, who moves next: 1 win, 0 draw, -1 loss."""
    other = "O" if mover == "X" else "X"
    cells = list(board)
    if winner_of(cells) is not None:
        return -1  # the previous mover completed a line
    free = [i for i, c in enumerate(cells) if c == " "]
    if not free:
        return 0
    return max(-_value(board[:i] + mover + board[i + 1 :], other) for i in free)


def scripted_tictactoe(env: MultiAgentEnv, agent: str, observation: str) -> str:
    """Reference opponent: perfect play (minimax), ties among the best moves broken by the env's RNG; it never loses."""
    game = env.unwrapped
    assert isinstance(game, TicTacToe)
    me, them = agent.upper(), game.other(agent).upper()
    board = "".join(game.board)
    free = [m - 1 for m in game.legal_moves()]
    scores = {i: -_value(board[:i] + me + board[i + 1 :], them) for i in free}
    best = [i for i in free if scores[i] == max(scores.values())]
    return str(best[int(game.np_random.integers(len(best)))] + 1)
