"""Exact Kuhn Poker numbers: what a strategy table earns against another, and the best response to one.

Kuhn Poker (``multiagent:KuhnPoker-v0``) is small enough to add up: six equally likely deals and at
most three moves. A player is a **strategy table**, one distribution over moves per information set
(the history of moves so far and the player's own card), which is all a policy that reads only its
own observations can depend on. From two tables this gives the first seat's expected chips and its
probability of winning, exactly; the self-play demo (:mod:`gem_trl.selfplay`) uses it to put its
evaluation games next to the numbers they estimate, and against the ceiling: the best response.

Histories are the moves so far, space-separated: ``""`` (``player_0`` opens: ``check`` or
``bet``), ``"bet"`` and ``"check"`` (``player_1`` answers), ``"check bet"`` (``player_0`` faces a
bet). A table's probabilities of one information set may add up to less than 1: the rest is a
**forfeit** (a reply that names no legal move), which the env scores as a fold.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from gem_core.errors import ConfigError

__all__ = [
    "CARDS",
    "HISTORIES",
    "SEATS",
    "Strategy",
    "best_response",
    "check_strategy",
    "first_seat_value",
    "nash_strategy",
    "random_strategy",
    "scripted_strategy",
    "seat_of",
    "versus",
]

#: Card ranks, low to high (as :data:`gem_multiagent.kuhn_poker.CARDS`).
CARDS = ("J", "Q", "K")
#: The seats, first mover first.
SEATS = ("player_0", "player_1")
#: Every history at which a player acts, and the moves legal there.
HISTORIES: dict[str, tuple[str, str]] = {
    "": ("check", "bet"),
    "bet": ("call", "fold"),
    "check": ("check", "bet"),
    "check bet": ("call", "fold"),
}
#: A strategy table: ``(history, card) -> {move: probability}``; the missing mass is a forfeit.
Strategy = Mapping[tuple[str, str], Mapping[str, float]]


def seat_of(history: str) -> str:
    """The seat that acts after ``history`` (the seats alternate, ``player_0`` first)."""
    return SEATS[len(history.split()) % 2]


def check_strategy(strategy: Strategy, seat: str | None = None) -> None:
    """Refuse a table with an unknown information set, an illegal move or probabilities outside ``[0, 1]``.

    Args:
        strategy: The table.
        seat: When given, the table must cover every information set of this seat.

    Raises:
        ConfigError: Naming the information set and what is wrong with it.
    """
    for (history, card), moves in strategy.items():
        if history not in HISTORIES or card not in CARDS:
            raise ConfigError(
                f"strategy entry ({history!r}, {card!r}) is no information set: histories are "
                f"{sorted(HISTORIES)}, cards {list(CARDS)}"
            )
        illegal = set(moves) - set(HISTORIES[history])
        if illegal:
            raise ConfigError(
                f"strategy entry ({history!r}, {card!r}) has moves {sorted(illegal)} that are not legal there "
                f"(legal: {list(HISTORIES[history])})"
            )
        total = sum(moves.values())
        if any(p < 0 for p in moves.values()) or total > 1 + 1e-9:
            raise ConfigError(
                f"strategy entry ({history!r}, {card!r}) has probabilities {dict(moves)}: each must be >= 0 and "
                "their sum <= 1 (the rest is a forfeit)"
            )
    if seat is not None:
        missing = [(h, c) for h in HISTORIES if seat_of(h) == seat for c in CARDS if (h, c) not in strategy]
        if missing:
            raise ConfigError(f"the {seat} strategy has no entry for {missing}; give one per (history, card)")


def _play(history: str, cards: tuple[str, str], tables: tuple[Strategy, Strategy], reach: float) -> tuple[float, float]:
    """Expected chips of ``player_0`` and its probability of winning from ``history`` on, times ``reach``."""
    seat = len(history.split()) % 2
    card = cards[seat]
    odds = tables[seat].get((history, card))
    if odds is None:
        raise ConfigError(f"the {SEATS[seat]} strategy has no entry for ({history!r}, {card!r})")
    sign = 1.0 if seat == 0 else -1.0  # the actor's chips, seen by player_0
    high = CARDS.index(cards[0]) > CARDS.index(cards[1])
    chips = wins = 0.0
    fold = 1.0 - sum(odds.get(m, 0.0) for m in HISTORIES[history])  # forfeits are folds
    for move in HISTORIES[history]:
        p = odds.get(move, 0.0)
        if move == "fold":
            fold += p
            continue
        if p == 0.0:
            continue
        after = f"{history} {move}".strip()
        if after in ("check check", "bet call", "check bet call"):
            stake = 2.0 if move == "call" else 1.0
            chips += reach * p * (stake if high else -stake)
            wins += reach * p * high
        else:
            c, w = _play(after, cards, tables, reach * p)
            chips, wins = chips + c, wins + w
    if fold > 0:
        chips += reach * fold * -sign  # a fold (or forfeit) loses the ante: no one folds after putting in a bet
        wins += reach * fold * (seat == 1)
    return chips, wins


def first_seat_value(first: Strategy, second: Strategy) -> tuple[float, float]:
    """``player_0``'s expected chips and probability of winning when ``first`` plays it and ``second`` ``player_1``.

    The deals are the six orderings of two of the three cards, each with probability 1/6; Kuhn Poker
    has no draws, so ``player_1`` wins with probability ``1 - win``.
    """
    chips = wins = 0.0
    deals = list(itertools.permutations(CARDS, 2))
    for cards in deals:
        c, w = _play("", (cards[0], cards[1]), (first, second), 1.0 / len(deals))
        chips, wins = chips + c, wins + w
    return chips, wins


def versus(strategy: Strategy, opponent: Strategy) -> dict[str, float]:
    """``strategy`` against ``opponent`` in each seat and on average (each seat half the games).

    Returns:
        ``chips`` and ``win_rate`` (the seat average), and ``chips_player_0``, ``win_rate_player_0``,
        ``chips_player_1``, ``win_rate_player_1``.
    """
    first_chips, first_wins = first_seat_value(strategy, opponent)
    second_chips, second_wins = first_seat_value(opponent, strategy)
    out = {
        "chips_player_0": first_chips,
        "win_rate_player_0": first_wins,
        "chips_player_1": -second_chips,
        "win_rate_player_1": 1.0 - second_wins,
    }
    out["chips"] = (out["chips_player_0"] + out["chips_player_1"]) / 2
    out["win_rate"] = (out["win_rate_player_0"] + out["win_rate_player_1"]) / 2
    return out


def best_response(opponent: Strategy, seat: str) -> tuple[dict[tuple[str, str], dict[str, float]], float]:
    """The pure strategy of ``seat`` that earns the most chips against ``opponent``, and those chips.

    There are 2**6 pure strategies per seat (two information sets per card, two moves each); every
    one is scored exactly and the best kept (a mixed strategy earns a mean of pure ones, so no
    mixed strategy earns more).

    Raises:
        ConfigError: ``seat`` is not a seat.
    """
    if seat not in SEATS:
        raise ConfigError(f"seat must be one of {list(SEATS)}, got {seat!r}")
    sets = [(h, c) for h in HISTORIES if seat_of(h) == seat for c in CARDS]
    best: tuple[dict[tuple[str, str], dict[str, float]], float] | None = None
    for choice in itertools.product((0, 1), repeat=len(sets)):
        table = {key: {HISTORIES[key[0]][pick]: 1.0} for key, pick in zip(sets, choice, strict=True)}
        chips = first_seat_value(table, opponent)[0] if seat == "player_0" else -first_seat_value(opponent, table)[0]
        if best is None or chips > best[1] + 1e-12:
            best = (table, chips)
    assert best is not None
    return best


def random_strategy() -> dict[tuple[str, str], dict[str, float]]:
    """Each legal move with probability 1/2 (:func:`gem_multiagent.versus.random_player`)."""
    return {(h, c): {m: 0.5 for m in moves} for h, moves in HISTORIES.items() for c in CARDS}


def scripted_strategy() -> dict[tuple[str, str], dict[str, float]]:
    """The table of :func:`gem_multiagent.kuhn_poker.scripted_kuhn` (both seats).

    Opens or answers a check with a bet on K, on J a third of the time (a bluff), never on Q; facing a
    bet calls with K, with Q a third of the time, folds J.
    """
    aggressive = {"J": 1 / 3, "Q": 0.0, "K": 1.0}
    call = {"J": 0.0, "Q": 1 / 3, "K": 1.0}
    table: dict[tuple[str, str], dict[str, float]] = {}
    for c in CARDS:
        for h in ("", "check"):
            table[(h, c)] = {"bet": aggressive[c], "check": 1 - aggressive[c]}
        for h in ("bet", "check bet"):
            table[(h, c)] = {"call": call[c], "fold": 1 - call[c]}
    return table


def nash_strategy(alpha: float = 0.0) -> dict[tuple[str, str], dict[str, float]]:
    """A Nash equilibrium of Kuhn Poker (both seats), from the one-parameter family of ``player_0``'s.

    ``player_0`` bets J with ``alpha``, K with ``3 * alpha``, never Q, and after check-bet calls Q
    with ``alpha + 1/3``; ``player_1`` calls a bet with K, Q a third of the time, bets after a check
    with K and J a third of the time. ``player_0``'s value is -1/18 chip a game.

    Raises:
        ConfigError: ``alpha`` outside ``[0, 1/3]``.
    """
    if not 0 <= alpha <= 1 / 3:
        raise ConfigError(f"alpha must be in [0, 1/3], got {alpha}")
    open_bet = {"J": alpha, "Q": 0.0, "K": 3 * alpha}
    call_first = {"J": 0.0, "Q": alpha + 1 / 3, "K": 1.0}
    call_second = {"J": 0.0, "Q": 1 / 3, "K": 1.0}
    bet_second = {"J": 1 / 3, "Q": 0.0, "K": 1.0}
    table: dict[tuple[str, str], dict[str, float]] = {}
    for c in CARDS:
        table[("", c)] = {"bet": open_bet[c], "check": 1 - open_bet[c]}
        table[("check bet", c)] = {"call": call_first[c], "fold": 1 - call_first[c]}
        table[("bet", c)] = {"call": call_second[c], "fold": 1 - call_second[c]}
        table[("check", c)] = {"bet": bet_second[c], "check": 1 - bet_second[c]}
    return table
