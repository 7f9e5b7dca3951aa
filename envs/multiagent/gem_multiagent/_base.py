"""What the two-player games share: reading a move from a reply, ending a game, forfeits."""

from __future__ import annotations

import re
from typing import Any

from gem_core.multiagent import MultiStepReturn, TurnBasedEnv

__all__ = ["TwoPlayerGame", "last_int", "last_word"]

_INT = re.compile(r"-?\d+")


def last_int(text: str) -> int | None:
    """The last integer of a reply (of its last 300 characters: the answer comes last), else ``None``."""
    found = _INT.findall(text[-300:])
    return int(found[-1]) if found else None


def last_word(text: str, words: tuple[str, ...]) -> str | None:
    """The last of ``words`` named in a reply (whole words, any case), else ``None``."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, words)) + r")\b", re.IGNORECASE)
    found = pattern.findall(text[-300:])
    return found[-1].lower() if found else None


class TwoPlayerGame(TurnBasedEnv):
    """A zero-sum game of two seats in turn; a malformed or illegal move forfeits it.

    Rewards come at the end: ``+win_reward`` / ``-win_reward`` (0 each for a draw), and each final
    info holds ``outcome`` (``"win"``, ``"loss"`` or ``"draw"``) and ``success``.
    """

    metadata = {"multi_turn": True, "zero_sum": True}
    win_reward = 1.0

    def other(self, agent: str) -> str:
        """The other seat."""
        a, b = self.possible_agents
        return b if agent == a else a

    def finish(
        self,
        winner: str | None,
        text: str,
        stakes: float | None = None,
        extra: dict[str, dict[str, Any]] | None = None,
    ) -> MultiStepReturn:
        """End the game: ``winner`` (``None`` for a draw) gets ``stakes``, the other ``-stakes``; both read ``text``."""
        a, b = self.possible_agents
        value = self.win_reward if stakes is None else stakes
        if winner is None:
            rewards = {a: 0.0, b: 0.0}
            outcome = {a: "draw", b: "draw"}
        else:
            loser = self.other(winner)
            rewards = {winner: value, loser: -value}
            outcome = {winner: "win", loser: "loss"}
        more = extra or {}
        infos = {x: {"outcome": outcome[x], "success": outcome[x] == "win", **more.get(x, {})} for x in (a, b)}
        return {a: text, b: text}, rewards, {a: True, b: True}, {}, infos

    def forfeit(self, agent: str, why: str, format_error: bool) -> MultiStepReturn:
        """``agent`` made a move that does not parse or is not legal: it loses the game."""
        extra = {agent: {"format_error": format_error, "illegal_move": not format_error}}
        return self.finish(self.other(agent), f"{agent} forfeits: {why}.", extra=extra)
