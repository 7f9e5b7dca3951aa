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
SPECS += [
    *game_variants(
        "Mastermind",
        "gem_games.mastermind:MastermindEnv",
        {
            "easy": {"code_length": 2, "num_symbols": 6, "max_turns": 10},
            "hard": {"code_length": 4, "num_symbols": 8, "max_turns": 30},
            "random": {"randomize": True},
        },
        description="Crack a code of digits from black and white peg counts",
    ),
    *game_variants(
        "Minesweeper",
        "gem_games.minesweeper:MinesweeperEnv",
        {
            "easy": {"rows": 5, "cols": 5, "mines": 5, "max_turns": 25},
            "hard": {"rows": 8, "cols": 8, "mines": 12, "max_turns": 64},
            "random": {"randomize": True},
        },
        description="Reveal every safe cell of a grid, logic alone suffices",
    ),
    *game_variants(
        "Wordle",
        "gem_games.wordle:WordleEnv",
        {
            "easy": {"word_length": 3, "max_turns": 15},
            "hard": {"word_length": 5, "max_turns": 25},
            "random": {"randomize": True},
        },
        description="Find a secret word from green/yellow/grey letter feedback",
    ),
    *game_variants(
        "Hangman",
        "gem_games.hangman:HangmanEnv",
        {
            "easy": {"word_length": 3, "max_turns": 10},
            "hard": {"word_length": 7, "max_turns": 20},
            "random": {"randomize": True},
        },
        description="Reveal a secret word letter by letter",
    ),
    *game_variants(
        "FifteenPuzzle",
        "gem_games.fifteen_puzzle:FifteenPuzzleEnv",
        {
            "easy": {"size": 2, "scramble_moves": 100, "max_turns": 10},
            "hard": {"size": 4, "scramble_moves": 40, "max_turns": 50},
            "random": {"randomize": True},
        },
        description="Slide numbered tiles into order",
    ),
]
