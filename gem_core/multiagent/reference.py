"""Reference multi-agent envs of gem-core: Nim (agents in turn) and rock-paper-scissors (all at once).

Small and exact, for tests, docs and ``gem check``; the games people train on live in gem-multiagent.
"""

from __future__ import annotations

import re
from typing import Any

from gem_core.multiagent.core import MultiResetReturn, MultiStepReturn, ParallelEnv, TurnBasedEnv

__all__ = ["NimEnv", "RockPaperScissorsEnv"]

_INT = re.compile(r"-?\d+")
_MOVES = ("rock", "paper", "scissors")
_BEATS = {"rock": "scissors", "paper": "rock", "scissors": "paper"}


class NimEnv(TurnBasedEnv):
    """Two players take 1 to 3 stones in turn; whoever takes the last stone wins (+1, the other -1).

    The pile starts with ``low``..``high`` stones (drawn from the env's RNG). A reply without a
    number, or with a count that is not legal, forfeits the game (-1 for the mover, +1 for the other).

    Args:
        low: Fewest stones at the start.
        high: Most stones at the start.
    """

    metadata = {"multi_turn": True, "zero_sum": True}
    possible_agents = ("first", "second")

    def __init__(self, low: int = 5, high: int = 12) -> None:
        self.low, self.high = low, high
        self.pile = 0

    def _reset(self, options: dict[str, Any] | None) -> MultiResetReturn:
        self.pile = int(self.np_random.integers(self.low, self.high + 1))
        self._selection = "first"
        rules = (
            f"Nim: {self.pile} stones. Players take 1, 2 or 3 stones in turn; whoever takes the last stone wins. "
            "Answer with the number of stones you take."
        )
        return (
            {"first": f"{rules} You move first. How many do you take?", "second": f"{rules} You move second."},
            {},
        )

    def _turn(self, agent: str, action: str) -> MultiStepReturn:
        other = "second" if agent == "first" else "first"
        found = _INT.findall(action[-200:])
        take = int(found[-1]) if found else None
        if take is None or not 1 <= take <= min(3, self.pile):
            why = "no number" if take is None else f"{take} is not a legal move with {self.pile} left"
            return self._end(other, agent, f"{agent} forfeits ({why}).", format_error=take is None)
        self.pile -= take
        if self.pile == 0:
            return self._end(agent, other, f"{agent} took the last stone.")
        self._selection = other
        news = f"{agent} took {take}; {self.pile} left."
        return (
            {agent: news, other: f"{news} Your move: how many do you take?"},
            {},
            {},
            {},
            {agent: {"parsed_action": str(take)}},
        )

    def _end(self, winner: str, loser: str, why: str, format_error: bool = False) -> MultiStepReturn:
        text = f"{why} {winner} wins."
        done = {winner: True, loser: True}
        infos: dict[str, dict[str, Any]] = {
            winner: {"outcome": "win", "success": True},
            loser: {"outcome": "loss", "success": False},
        }
        if format_error:
            infos[loser]["format_error"] = True
        return {winner: text, loser: text}, {winner: 1.0, loser: -1.0}, done, {}, infos

    def sample_random_action(self, agent: str) -> str:
        return str(int(self.np_random.integers(1, 4)))

    def optimal_move(self) -> int:
        """The move that leaves a multiple of 4 (a win for the mover whenever the pile is not one)."""
        return self.pile % 4 or 1


class RockPaperScissorsEnv(ParallelEnv):
    """Two players name rock, paper or scissors at once, ``rounds`` times; each round +1 to its winner, -1 to its loser.

    A reply naming no move (or several different ones) loses the round; two such replies draw it.

    Args:
        rounds: Rounds per episode.
    """

    metadata = {"multi_turn": True, "zero_sum": True}
    possible_agents = ("player_0", "player_1")

    def __init__(self, rounds: int = 3) -> None:
        self.rounds = rounds
        self.round = 0
        self.score = {"player_0": 0.0, "player_1": 0.0}

    def _reset(self, options: dict[str, Any] | None) -> MultiResetReturn:
        self.round = 0
        self.score = dict.fromkeys(self.possible_agents, 0.0)
        brief = f"Rock-paper-scissors, {self.rounds} rounds. Answer rock, paper or scissors."
        return dict.fromkeys(self.possible_agents, brief), {}

    @staticmethod
    def parse(text: str) -> str | None:
        """The one move a reply names, else ``None``."""
        named = {m for m in _MOVES if re.search(rf"\b{m}\b", text[-200:].lower())}
        return named.pop() if len(named) == 1 else None

    def _joint(self, actions: dict[str, str]) -> MultiStepReturn:
        a, b = self.possible_agents
        move = {agent: self.parse(actions[agent]) for agent in (a, b)}
        self.round += 1
        move_a, move_b = move[a], move[b]
        if move_a == move_b:
            result = {a: 0.0, b: 0.0}
        elif move_b is None or (move_a is not None and _BEATS[move_a] == move_b):
            result = {a: 1.0, b: -1.0}
        else:
            result = {a: -1.0, b: 1.0}
        for agent in (a, b):
            self.score[agent] += result[agent]
        done = self.round >= self.rounds
        news = f"Round {self.round}: {a} {move[a] or 'no move'}, {b} {move[b] or 'no move'}."
        infos: dict[str, dict[str, Any]] = {x: {"format_error": move[x] is None} for x in (a, b)}
        if done:
            for x, y in ((a, b), (b, a)):
                diff = self.score[x] - self.score[y]
                infos[x]["outcome"] = "win" if diff > 0 else "loss" if diff < 0 else "draw"
                infos[x]["success"] = diff > 0
        return dict.fromkeys((a, b), news), result, dict.fromkeys((a, b), done), {}, infos

    def sample_random_action(self, agent: str) -> str:
        return _MOVES[int(self.np_random.integers(3))]
