"""Kuhn Poker (three cards, one bet) for two agents in turn, and a scripted reference opponent."""

from __future__ import annotations

from typing import Any

from gem_core.multiagent import MultiAgentEnv, MultiResetReturn, MultiStepReturn

from gem_multiagent._base import TwoPlayerGame, last_word

__all__ = ["CARDS", "KuhnPoker", "scripted_kuhn"]

#: Card ranks, low to high.
CARDS = ("J", "Q", "K")
_WORDS = ("check", "bet", "call", "fold")


class KuhnPoker(TwoPlayerGame):
    """Each player antes 1 and gets one of J < Q < K; ``player_0`` acts first, one bet of 1 at most.

    Moves: ``check`` or ``bet`` when no bet is open, ``call`` or ``fold`` facing one (the last of
    these words in the reply counts). The pot goes to the higher card at showdown; the rewards are
    the net chips (+-1 or +-2). A reply with none of the words, or a move that is not legal now,
    is a fold (it loses what the player put in), marked ``format_error`` or ``illegal_move``.
    """

    possible_agents = ("player_0", "player_1")

    def __init__(self) -> None:
        self.cards: dict[str, str] = {}
        self.history: list[str] = []
        self.put = {"player_0": 1, "player_1": 1}

    def _reset(self, options: dict[str, Any] | None) -> MultiResetReturn:
        deal = self.np_random.permutation(3)
        self.cards = {"player_0": CARDS[int(deal[0])], "player_1": CARDS[int(deal[1])]}
        self.history = []
        self.put = {"player_0": 1, "player_1": 1}
        self._selection = "player_0"
        rules = (
            "Kuhn Poker: cards J < Q < K, each player antes 1 chip and gets one card; one bet of 1 chip at most. "
            "With no bet open say check or bet; facing a bet say call or fold. Higher card wins the pot at showdown."
        )
        return {
            a: f"{rules} You are {a}, your card is {self.cards[a]}."
            + (" You act first: check or bet?" if a == "player_0" else "")
            for a in self.possible_agents
        }, {}

    def legal_moves(self) -> tuple[str, ...]:
        """The moves open to the player in turn."""
        return ("call", "fold") if self.history and self.history[-1] == "bet" else ("check", "bet")

    def _turn(self, agent: str, action: str) -> MultiStepReturn:
        move = last_word(action, _WORDS)
        other = self.other(agent)
        if move is None or move not in self.legal_moves():
            why = (
                "no move named" if move is None else f"{move} is not legal now (say {' or '.join(self.legal_moves())})"
            )
            extra = {agent: {"format_error": move is None, "illegal_move": move is not None}}
            return self._fold(agent, f"{agent} folds: {why}.", extra)
        self.history.append(move)
        if move == "fold":
            return self._fold(agent, f"{agent} folds.", {})
        if move in ("bet", "call"):
            self.put[agent] += 1
        ended = self.history in (["check", "check"], ["bet", "call"], ["check", "bet", "call"])
        if ended:
            winner = agent if CARDS.index(self.cards[agent]) > CARDS.index(self.cards[other]) else other
            text = (
                f"{agent} {move}s. Showdown: player_0 has {self.cards['player_0']}, player_1 has "
                f"{self.cards['player_1']}; {winner} wins {self.put[self.other(winner)]} chip(s)."
            )
            return self.finish(winner, text, stakes=float(self.put[self.other(winner)]))
        self._selection = other
        news = f"{agent} {move}s."
        return (
            {agent: news, other: f"{news} Your move: {' or '.join(self.legal_moves())}?"},
            {},
            {},
            {},
            {agent: {"parsed_action": move}},
        )

    def _fold(self, agent: str, text: str, extra: dict[str, dict[str, Any]]) -> MultiStepReturn:
        return self.finish(self.other(agent), text, stakes=float(self.put[agent]), extra=extra)

    def sample_random_action(self, agent: str) -> str:
        moves = self.legal_moves()
        return moves[int(self.np_random.integers(len(moves)))]


def scripted_kuhn(env: MultiAgentEnv, agent: str, observation: str) -> str:
    """Reference opponent: bets or calls with K, checks and calls a third of the time with Q, bluffs a third with J."""
    game = env.unwrapped
    assert isinstance(game, KuhnPoker)
    card, rng = game.cards[agent], game.np_random
    if "bet" in game.legal_moves():
        if card == "K" or (card == "J" and rng.random() < 1 / 3):
            return "bet"
        return "check"
    if card == "K" or (card == "Q" and rng.random() < 1 / 3):
        return "call"
    return "fold"
