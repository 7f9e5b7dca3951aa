"""Spec declarations of GuessTheNumber, Mastermind, Minesweeper, Wordle, Hangman and FifteenPuzzle.

Light on purpose (see :mod:`gem_games.plugin`): ids, entry points and per-variant kwargs only.
Easy and hard configurations follow GEM's, so GEM ids keep their meaning.
"""

from __future__ import annotations

from gem_core.registry import EnvAlias, EnvSpec

from gem_games._specs import game_variants

SPECS: list[EnvSpec | EnvAlias] = [
    *game_variants(
        "GuessTheNumber",
        "gem_games.guess_the_number:GuessTheNumberEnv",
        {
            "easy": {"low": 1, "high": 10, "max_turns": 4},
            "hard": {"low": 1, "high": 50, "max_turns": 7},
            "random": {"randomize": True},
        },
        description="Find a secret number from higher/lower hints",
    ),
    EnvAlias(
        id="game:GuessTheNumber-v0",
        target="game:GuessTheNumber-v0-easy",
        deprecated=True,
        message="GEM removed this id; it now means the easy variant (1 to 10 in 4 turns).",
    ),
]
