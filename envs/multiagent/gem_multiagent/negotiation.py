"""A negotiation over a pool of items with private values, and a scripted reference negotiator."""

from __future__ import annotations

import re
from typing import Any

from gem_core.multiagent import MultiAgentEnv, MultiResetReturn, MultiStepReturn, TurnBasedEnv

__all__ = ["ITEMS", "Negotiation", "parse_offer", "scripted_negotiator"]

#: The item kinds of the pool.
ITEMS = ("books", "hats", "balls")
_OFFER = re.compile(r"propose\s*:?\s*((?:\s*,?\s*(?:books|hats|balls)\s*=\s*-?\d+)+)", re.IGNORECASE)
_PART = re.compile(r"(books|hats|balls)\s*=\s*(-?\d+)", re.IGNORECASE)


def parse_offer(text: str) -> dict[str, int] | str | None:
    """``"accept"``, the last ``propose: books=1, hats=0, balls=2`` (what the proposer keeps), or ``None``."""
    tail = text[-400:]
    offers = list(_OFFER.finditer(tail))
    accept = [m.start() for m in re.finditer(r"\baccept\b", tail, re.IGNORECASE)]
    if offers and (not accept or offers[-1].start() > accept[-1]):
        keep: dict[str, int] = {}
        for kind, count in _PART.findall(offers[-1].group(1)):
            keep[kind.lower()] = int(count)
        return keep
    return "accept" if accept else None


class Negotiation(TurnBasedEnv):
    """Two agents split a pool of books, hats and balls; each values the kinds privately (values sum to 10).

    In turn, an agent proposes what it keeps (``propose: books=1, hats=2, balls=0``; the other gets
    the rest) or accepts the offer on the table (``accept``). A deal pays each agent the value of its
    share divided by the value of the whole pool (in [0, 1]); a counter-offer to the ``max_offers``-th
    proposal ends the talks with no deal, which pays both 0. A reply with no move, an offer the pool
    cannot cover, or ``accept`` with no offer ends the talks with no deal and costs the mover -1
    (``format_error`` or ``illegal_move``). Not zero-sum: both gain from a deal.

    Args:
        max_offers: Proposals before the talks end without a deal.
    """

    metadata = {"multi_turn": True, "zero_sum": False}
    possible_agents = ("alice", "bob")

    def __init__(self, max_offers: int = 6) -> None:
        self.max_offers = max_offers
        self.pool: dict[str, int] = {}
        self.values: dict[str, dict[str, int]] = {}
        self.offer: tuple[str, dict[str, int]] | None = None
        self.offers = 0

    def _draw_values(self) -> dict[str, int]:
        while True:
            cuts = sorted(int(x) for x in self.np_random.integers(0, 11, size=2))
            values = dict(zip(ITEMS, (cuts[0], cuts[1] - cuts[0], 10 - cuts[1]), strict=True))
            if sum(values[k] * self.pool[k] for k in ITEMS) > 0:
                return values

    def value(self, agent: str, share: dict[str, int]) -> int:
        """``agent``'s private value of ``share``."""
        return sum(self.values[agent][k] * share.get(k, 0) for k in ITEMS)

    def _reset(self, options: dict[str, Any] | None) -> MultiResetReturn:
        self.pool = {k: int(n) for k, n in zip(ITEMS, self.np_random.integers(1, 4, size=3), strict=True)}
        self.values = {a: self._draw_values() for a in self.possible_agents}
        self.offer = None
        self.offers = 0
        self._selection = "alice"
        pool = ", ".join(f"{n} {k}" for k, n in self.pool.items())
        briefs = {}
        for agent in self.possible_agents:
            worth = ", ".join(f"{k} {v} each" for k, v in self.values[agent].items())
            briefs[agent] = (
                f"Negotiation: split {pool} with the other player. Your private values: {worth}. "
                f"Say 'propose: books=B, hats=H, balls=L' (what you keep) or 'accept'. "
                f"At most {self.max_offers} proposals; no deal pays nothing."
                + (" You speak first." if agent == "alice" else "")
            )
        return briefs, {}

    def _turn(self, agent: str, action: str) -> MultiStepReturn:
        other = "bob" if agent == "alice" else "alice"
        move = parse_offer(action)
        if move is None:
            return self._breakdown(agent, "no proposal or accept in the reply", format_error=True)
        if move == "accept":
            if self.offer is None:
                return self._breakdown(agent, "there is no offer to accept", format_error=False)
            proposer, keep = self.offer
            shares = {proposer: keep, agent: {k: self.pool[k] - keep[k] for k in ITEMS}}
            rewards = {a: self.value(a, shares[a]) / self.value(a, self.pool) for a in self.possible_agents}
            text = f"{agent} accepts: {proposer} keeps {keep}, {agent} gets {shares[agent]}."
            infos = {a: {"deal": True, "success": True, "share": shares[a]} for a in self.possible_agents}
            return (
                dict.fromkeys(self.possible_agents, text),
                rewards,
                dict.fromkeys(self.possible_agents, True),
                {},
                infos,
            )
        assert isinstance(move, dict)
        keep = {k: move.get(k, 0) for k in ITEMS}
        if any(keep[k] < 0 or keep[k] > self.pool[k] for k in ITEMS):
            return self._breakdown(agent, f"{keep} does not fit the pool {self.pool}", format_error=False)
        if self.offers >= self.max_offers:  # the last offer was the final one: a counter-offer ends the talks
            text = f"Talks end without a deal: {self.max_offers} proposals were made and the last was not accepted."
            infos = {a: {"deal": False, "success": False} for a in self.possible_agents}
            return dict.fromkeys(self.possible_agents, text), {}, dict.fromkeys(self.possible_agents, True), {}, infos
        self.offer = (agent, keep)
        self.offers += 1
        text = f"{agent} proposes to keep {keep}; {other} would get { ({k: self.pool[k] - keep[k] for k in ITEMS}) }."
        if self.offers == self.max_offers:
            text += " That was the last proposal: accept it or the talks end without a deal."
        self._selection = other
        return {agent: text, other: f"{text} Accept or propose?"}, {}, {}, {}, {agent: {"parsed_action": str(keep)}}

    def _breakdown(self, agent: str, why: str, format_error: bool) -> MultiStepReturn:
        text = f"Talks end without a deal: {why} ({agent})."
        infos: dict[str, dict[str, Any]] = {a: {"deal": False, "success": False} for a in self.possible_agents}
        infos[agent].update(format_error=format_error, illegal_move=not format_error)
        rewards = {agent: -1.0}
        return dict.fromkeys(self.possible_agents, text), rewards, dict.fromkeys(self.possible_agents, True), {}, infos

    def sample_random_action(self, agent: str) -> str:
        if self.offer is not None and self.np_random.random() < 0.3:
            return "accept"
        keep = {k: int(self.np_random.integers(0, self.pool[k] + 1)) for k in ITEMS}
        return "propose: " + ", ".join(f"{k}={n}" for k, n in keep.items())


def scripted_negotiator(env: MultiAgentEnv, agent: str, observation: str) -> str:
    """Reference negotiator that concedes over time.

    It asks for its most valued items up to a share of its total value that starts at 70% and drops
    by 10 points per proposal made (to 40%); it accepts an offer worth at least that share minus 10
    points, and any offer worth something when it is the last one.
    """
    game = env.unwrapped
    assert isinstance(game, Negotiation)
    total = game.value(agent, game.pool)
    demand = max(0.4, 0.7 - 0.1 * game.offers)
    if game.offer is not None and game.offer[0] != agent:
        mine = game.value(agent, {k: game.pool[k] - game.offer[1][k] for k in ITEMS})
        if mine >= (demand - 0.1) * total or (game.offers >= game.max_offers and mine > 0):
            return "accept"
    keep = dict.fromkeys(ITEMS, 0)
    for kind in sorted(ITEMS, key=lambda k: -game.values[agent][k]):
        while keep[kind] < game.pool[kind] and game.value(agent, keep) < demand * total:
            keep[kind] += 1
    return "propose: " + ", ".join(f"{k}={n}" for k, n in keep.items())
