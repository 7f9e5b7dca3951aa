"""Exact Kuhn Poker values (gem_trl.kuhn_exact) against games played in the real env, and game-theory facts."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from gem_multiagent.kuhn_poker import scripted_kuhn
from gem_multiagent.versus import random_player
from gem_trl.kuhn_exact import (
    CARDS,
    HISTORIES,
    SEATS,
    best_response,
    check_strategy,
    first_seat_value,
    nash_strategy,
    random_strategy,
    scripted_strategy,
    seat_of,
    versus,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import gem_core
from gem_core.errors import ConfigError

KUHN = "multiagent:KuhnPoker-v0"


def table_player(table: Mapping[tuple[str, str], Mapping[str, float]], rng: np.random.Generator) -> Any:
    """A seat policy that plays a strategy table in the real env; the missing mass replies with no move."""

    def play(env: Any, agent: str, observation: str) -> str:
        game = env.unwrapped
        odds = table[(" ".join(game.history), game.cards[agent])]
        moves = list(odds)
        draw = rng.random()
        for move in moves:
            draw -= odds[move]
            if draw < 0:
                return move
        return "I pass on this one"  # names no move: the env forfeits it

    return play


def play_real_games(first: Any, second: Any, games: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``player_0``'s chips and wins over ``games`` games of the real env, ``first`` against ``second``."""
    env = gem_core.make(KUHN)
    chips, wins = np.zeros(games), np.zeros(games)
    for g in range(games):
        env.reset(seed=seed + g)
        total = 0.0
        while not env.episode_over:
            (agent,) = env.acting_agents()
            policy = first if agent == "player_0" else second
            _, rewards, _, _, infos = env.step({agent: policy(env, agent, "")})
            total += rewards.get("player_0", 0.0)
        chips[g], wins[g] = total, infos["player_0"]["outcome"] == "win"
    env.close()
    return chips, wins


def assert_close(samples: np.ndarray, exact: float) -> None:
    """The sample mean is within 4.5 standard errors of ``exact`` (a false alarm about once in 150,000 runs)."""
    error = samples.std(ddof=1) / math.sqrt(len(samples))
    assert abs(samples.mean() - exact) <= 4.5 * error + 1e-9, (samples.mean(), exact, error)


@pytest.mark.parametrize(
    ("first", "second"),
    [("scripted", "random"), ("random", "scripted"), ("scripted", "scripted")],
    ids=["scripted-first", "random-first", "scripted-both"],
)
def test_the_tables_of_the_real_players_give_the_chips_they_win_in_the_env(first: str, second: str) -> None:
    players = {"scripted": scripted_kuhn, "random": random_player}
    tables = {"scripted": scripted_strategy(), "random": random_strategy()}
    chips, wins = play_real_games(players[first], players[second], 1500, seed=11)
    exact_chips, exact_win = first_seat_value(tables[first], tables[second])
    assert_close(chips, exact_chips)
    assert_close(wins, exact_win)


@st.composite
def tables(draw: st.DrawFn) -> dict[tuple[str, str], dict[str, float]]:
    """A random mixed strategy for both seats; some information sets forfeit part of the time."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for history, moves in HISTORIES.items():
        for card in CARDS:
            a = draw(st.sampled_from([0.0, 0.2, 0.5, 0.9, 1.0]))
            kept = draw(st.sampled_from([1.0, 1.0, 0.7]))  # 0.7: 30% of replies name no move
            out[(history, card)] = {moves[0]: kept * a, moves[1]: kept * (1 - a)}
    return out


@settings(max_examples=3, deadline=None)
@given(table=tables(), seed=st.integers(0, 10_000))
def test_any_table_against_the_scripted_player_matches_the_real_env(
    table: dict[tuple[str, str], dict[str, float]], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    chips, wins = play_real_games(table_player(table, rng), scripted_kuhn, 800, seed=seed)
    exact_chips, exact_win = first_seat_value(table, scripted_strategy())
    assert_close(chips, exact_chips)
    assert_close(wins, exact_win)
    chips, wins = play_real_games(scripted_kuhn, table_player(table, rng), 800, seed=seed + 7)
    exact_chips, exact_win = first_seat_value(scripted_strategy(), table)
    assert_close(chips, exact_chips)
    assert_close(wins, exact_win)


@settings(max_examples=20, deadline=None)
@given(alpha=st.floats(0.0, 1 / 3))
def test_the_nash_family_is_an_equilibrium_worth_minus_one_eighteenth(alpha: float) -> None:
    nash = nash_strategy(alpha)
    assert math.isclose(first_seat_value(nash, nash)[0], -1 / 18, abs_tol=1e-12)
    assert math.isclose(best_response(nash, "player_0")[1], -1 / 18, abs_tol=1e-12)  # no deviation gains
    assert math.isclose(best_response(nash, "player_1")[1], 1 / 18, abs_tol=1e-12)


@settings(max_examples=10, deadline=None)
@given(table=tables(), opponent=tables())
def test_no_strategy_earns_more_than_the_best_response(
    table: dict[tuple[str, str], dict[str, float]], opponent: dict[tuple[str, str], dict[str, float]]
) -> None:
    for seat in SEATS:
        best = best_response(opponent, seat)[1]
        earned = versus(table, opponent)[f"chips_{seat}"]
        assert earned <= best + 1e-12


def test_the_scripted_players_ceiling() -> None:
    # scripted_kuhn's second seat is a Nash strategy, so the first seat gets the game value at best;
    # its first seat calls a check-bet with Q a third of the time (Nash: 2/3), which a bluffing J exploits.
    table, chips = best_response(scripted_strategy(), "player_1")
    assert math.isclose(chips, 1 / 6, abs_tol=1e-12)
    assert table[("check", "J")] == {"bet": 1.0}
    assert math.isclose(best_response(scripted_strategy(), "player_0")[1], -1 / 18, abs_tol=1e-12)
    assert math.isclose(versus(scripted_strategy(), scripted_strategy())["chips"], 0.0, abs_tol=1e-12)


def test_versus_reports_both_seats_and_their_mean() -> None:
    numbers = versus(random_strategy(), scripted_strategy())
    assert math.isclose(numbers["chips"], (numbers["chips_player_0"] + numbers["chips_player_1"]) / 2)
    assert math.isclose(numbers["chips_player_0"], -1 / 6) and math.isclose(numbers["chips_player_1"], -1 / 9)
    assert math.isclose(numbers["win_rate"], (numbers["win_rate_player_0"] + numbers["win_rate_player_1"]) / 2)


def test_seat_of_each_history() -> None:
    assert [seat_of(h) for h in HISTORIES] == ["player_0", "player_1", "player_1", "player_0"]


@pytest.mark.parametrize(
    ("table", "seat", "match"),
    [
        ({("raise", "J"): {"bet": 1.0}}, None, "no information set"),
        ({("", "A"): {"bet": 1.0}}, None, "no information set"),
        ({("", "J"): {"call": 1.0}}, None, "not legal there"),
        ({("", "J"): {"bet": 0.7, "check": 0.6}}, None, "sum <= 1"),
        ({("", "J"): {"bet": -0.1}}, None, "must be >= 0"),
        ({("", "J"): {"bet": 1.0}}, "player_0", "no entry for"),
    ],
    ids=["unknown-history", "unknown-card", "illegal-move", "over-one", "negative", "incomplete"],
)
def test_bad_tables_are_refused(table: Any, seat: str | None, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        check_strategy(table, seat)


def test_a_table_missing_an_information_set_is_refused_when_played() -> None:
    with pytest.raises(ConfigError, match="no entry for"):
        first_seat_value({("", "J"): {"bet": 1.0}}, scripted_strategy())
    with pytest.raises(ConfigError, match="seat must be"):
        best_response(scripted_strategy(), "dealer")
    with pytest.raises(ConfigError, match="alpha"):
        nash_strategy(0.5)
