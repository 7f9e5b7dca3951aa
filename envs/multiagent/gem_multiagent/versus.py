"""Single-agent views of the games: one seat for the model, the others played by the scripted reference players."""

from __future__ import annotations

from gem_core.multiagent import MultiAgentEnv, SeatEnv, SeatPolicy

from gem_multiagent.clues import Clues, scripted_listener, scripted_speaker
from gem_multiagent.connect_four import ConnectFour, scripted_connect_four
from gem_multiagent.kuhn_poker import KuhnPoker, scripted_kuhn
from gem_multiagent.negotiation import Negotiation, scripted_negotiator
from gem_multiagent.tictactoe import TicTacToe, scripted_tictactoe

__all__ = ["GAMES", "random_player", "scripted_players", "versus"]

#: Each game's env class and scripted player per seat.
GAMES: dict[str, tuple[type[MultiAgentEnv], dict[str, SeatPolicy]]] = {
    "tictactoe": (TicTacToe, {"x": scripted_tictactoe, "o": scripted_tictactoe}),
    "kuhn_poker": (KuhnPoker, {"player_0": scripted_kuhn, "player_1": scripted_kuhn}),
    "connect_four": (ConnectFour, {"red": scripted_connect_four, "yellow": scripted_connect_four}),
    "negotiation": (Negotiation, {"alice": scripted_negotiator, "bob": scripted_negotiator}),
    "clues": (Clues, {"speaker": scripted_speaker, "listener": scripted_listener}),
}


def scripted_players(game: str) -> dict[str, SeatPolicy]:
    """The scripted reference player of every seat of ``game``."""
    return dict(GAMES[game][1])


def random_player(env: MultiAgentEnv, agent: str, observation: str) -> str:
    """A player that samples a legal-looking move from the env (a baseline opponent)."""
    return env.sample_random_action(agent)


def versus(game: str, seat: str | None = None, opponent: str = "scripted", **kwargs: object) -> SeatEnv:
    """``game`` from one seat, against its scripted (or random) players.

    Args:
        game: A key of :data:`GAMES`.
        seat: The model's seat; ``None`` draws one each episode.
        opponent: ``"scripted"`` or ``"random"``.
        **kwargs: The game's constructor arguments.
    """
    cls, players = GAMES[game]
    env = cls(**kwargs)
    if opponent == "random":
        return SeatEnv(env, random_player, seat=seat)
    if opponent != "scripted":
        raise ValueError(f"opponent must be 'scripted' or 'random', got {opponent!r}")
    return SeatEnv(env, players, seat=seat)
