"""The games' rules, their scripted players, and the rewards a player might try to forge."""

from __future__ import annotations

from typing import Any

import pytest
from gem_core.errors import NotYourTurn, ResetNeeded, UnknownAgent
from gem_core.multiagent import MultiAgentEnv, SeatEnv
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_multiagent.clues import Clues, scripted_listener, scripted_speaker
from gem_multiagent.connect_four import ConnectFour, scripted_connect_four
from gem_multiagent.kuhn_poker import KuhnPoker, scripted_kuhn
from gem_multiagent.negotiation import Negotiation, scripted_negotiator
from gem_multiagent.tictactoe import LINES, TicTacToe, scripted_tictactoe
from gem_multiagent.versus import versus


def _play(env: MultiAgentEnv, moves: list[str]) -> Any:
    result = None
    for move in moves:
        result = env.step(move)
    return result


# ----------------------------------------------------------------------------- forging attempts, per game

FORGERIES = [
    # (game, moves before, the forging reply, who should lose)
    (TicTacToe, [], "I win. Final board: X X X. \\boxed{win}", "x"),
    (TicTacToe, ["5"], "5", "o"),  # a taken cell
    (TicTacToe, [], "10", "x"),
    (TicTacToe, [], "-1", "x"),
    (ConnectFour, [], "I connect four, I win!", "red"),
    (ConnectFour, ["4"] * 6, "4", "red"),  # a full column
    (ConnectFour, [], "8", "red"),
    (KuhnPoker, [], "call", "player_0"),  # nothing to call: a fold, never a showdown
    (KuhnPoker, ["bet"], "check", "player_1"),  # facing a bet, check is not legal
    (KuhnPoker, [], "I have the king, I win the pot", "player_0"),
]


@pytest.mark.parametrize(("cls", "before", "reply", "loser"), FORGERIES, ids=lambda x: str(x)[:30])
def test_malformed_or_illegal_moves_never_win(
    cls: type[MultiAgentEnv], before: list[str], reply: str, loser: str
) -> None:
    env = cls()
    env.reset(seed=1)
    _play(env, before)
    _, rewards, terms, _, infos = env.step(reply)
    assert rewards[loser] < 0 and all(terms.values()) and infos[loser]["outcome"] == "loss"
    assert infos[loser].get("format_error") or infos[loser].get("illegal_move")
    with pytest.raises(ResetNeeded):
        env.step("1")


@pytest.mark.parametrize("cls", [TicTacToe, ConnectFour, KuhnPoker, Negotiation, Clues], ids=lambda c: c.__name__)
def test_out_of_turn_and_unknown_agents_are_refused(cls: type[MultiAgentEnv]) -> None:
    env = cls()
    env.reset(seed=0)
    waiting = next(a for a in env.possible_agents if a != env.agent_selection)
    with pytest.raises(NotYourTurn):
        env.step({waiting: env.sample_random_action(waiting)})
    with pytest.raises(UnknownAgent):
        env.step({"referee": "I declare x the winner"})
    assert env.agent_turns == dict.fromkeys(env.possible_agents, 0)


def test_kuhn_pot_sizes() -> None:
    env = KuhnPoker()
    for seed in range(30):
        env.reset(seed=seed)
        _, rewards, _, _, _ = _play(env, ["bet", "call"])
        assert sorted(rewards.values()) == [-2.0, 2.0]
        high = max(env.cards, key=lambda a: "JQK".index(env.cards[a]))
        assert rewards[high] == 2.0
    env.reset(seed=0)
    assert _play(env, ["check", "bet", "fold"])[1] == {"player_0": -1.0, "player_1": 1.0}


def test_negotiation_pays_private_values_and_refuses_overclaims() -> None:
    env = Negotiation()
    env.reset(seed=4)
    pool = dict(env.pool)
    env.step("propose: books=0, hats=0, balls=0")
    _, rewards, terms, _, infos = env.step("accept")
    assert all(terms.values()) and rewards == {"alice": 0.0, "bob": 1.0}  # bob gets the whole pool
    assert env.value("bob", pool) > 0
    env.reset(seed=4)
    _, rewards, _, _, infos = env.step(f"propose: books={env.pool['books'] + 1}, hats=0, balls=0")
    assert rewards == {"alice": -1.0, "bob": 0.0} and infos["alice"]["illegal_move"]
    env.reset(seed=4)
    _, rewards, _, _, infos = env.step("accept")  # nothing on the table
    assert rewards["alice"] == -1.0 and not infos["bob"]["deal"]
    env.reset(seed=4)
    _, rewards, _, _, _ = env.step("propose: books=-3, hats=0, balls=0")  # a negative claim to get more
    assert rewards["alice"] == -1.0


def test_negotiation_ends_without_a_deal_after_the_last_offer() -> None:
    env = Negotiation(max_offers=2)
    env.reset(seed=0)
    env.step("propose: books=1, hats=0, balls=0")
    env.step("propose: books=0, hats=1, balls=0")
    _, rewards, terms, _, _ = env.step("propose: books=0, hats=0, balls=1")
    assert all(terms.values()) and rewards == {"alice": 0.0, "bob": 0.0}


@pytest.mark.parametrize(
    ("clue", "guess", "reward"),
    [("<secret>", "", 0.0), ("", "<all>", 0.0), ("", "", 0.0)],
    ids=["speaker-says-the-secret", "listener-lists-everything", "no-clue"],
)
def test_clues_cannot_be_gamed(clue: str, guess: str, reward: float) -> None:
    env = Clues()
    env.reset(seed=2)
    result = env.step(env.secret if clue == "<secret>" else (clue or "   "))
    if not env.episode_over:
        result = env.step(", ".join(env.candidates) if guess == "<all>" else guess)
    assert set(result[1].values()) == {reward}


# ----------------------------------------------------------------------------- scripted players


def _series(game: str, opponent: str, seat_policy: Any, seeds: int) -> list[float]:
    env = versus(game, opponent=opponent)
    out = []
    for seed in range(seeds):
        obs, _ = env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            _, reward, term, trunc, _ = env.step(seat_policy(env.env, env.seat, obs))
            total += reward
            done = term or trunc
        out.append(total)
    return out


@pytest.mark.parametrize(
    ("game", "policy", "never_loses", "min_wins"),
    [
        ("tictactoe", scripted_tictactoe, True, 30),  # minimax: never loses
        ("connect_four", scripted_connect_four, False, 34),  # greedy: a random double threat can beat it
    ],
    ids=["tictactoe", "connect_four"],
)
def test_scripted_players_beat_random_ones(game: str, policy: Any, never_loses: bool, min_wins: int) -> None:
    results = _series(game, "random", policy, 40)
    assert sum(r > 0 for r in results) >= min_wins
    if never_loses:
        assert min(results) >= 0.0


def test_scripted_tictactoe_draws_itself() -> None:
    assert set(_series("tictactoe", "scripted", scripted_tictactoe, 20)) == {0.0}


def test_scripted_kuhn_wins_chips_from_a_random_player() -> None:
    assert sum(_series("kuhn_poker", "random", scripted_kuhn, 300)) > 0


def test_scripted_negotiators_make_deals_and_clues_players_cooperate() -> None:
    deals = _series("negotiation", "scripted", scripted_negotiator, 40)
    assert sum(r > 0 for r in deals) >= 35 and max(deals) <= 1.0
    env = SeatEnv(Clues(), scripted_listener, seat="speaker")
    wins = 0
    for seed in range(40):
        env.reset(seed=seed)
        wins += env.step(scripted_speaker(env.env, "speaker", ""))[1] == 1.0
    assert wins >= 35


# ----------------------------------------------------------------------------- property: an independent referee


def _referee(moves: list[int]) -> tuple[str | None, int]:
    """Who wins (``"x"``, ``"o"``, ``"draw"``) and after how many moves, or (None, n) if the game goes on."""
    board: dict[int, str] = {}
    for n, move in enumerate(moves):
        mark = "x" if n % 2 == 0 else "o"
        if not 1 <= move <= 9 or move in board:
            return ("o" if mark == "x" else "x"), n + 1
        board[move] = mark
        if any(all(board.get(c + 1) == mark for c in line) for line in LINES):
            return mark, n + 1
        if len(board) == 9:
            return "draw", n + 1
    return None, len(moves)


@settings(max_examples=80, deadline=None)
@given(moves=st.lists(st.integers(0, 10), max_size=12))
def test_tictactoe_matches_an_independent_referee(moves: list[int]) -> None:
    env = TicTacToe()
    env.reset(seed=0)
    outcome, length = _referee(moves)
    result = None
    for move in moves[:length]:
        result = env.step(f"I play {move}")
    if outcome is None:
        assert not env.episode_over
        return
    assert result is not None and env.episode_over
    rewards = result[1]
    if outcome == "draw":
        assert rewards == {"x": 0.0, "o": 0.0}
    else:
        assert rewards[outcome] == 1.0 and sum(rewards.values()) == 0.0
