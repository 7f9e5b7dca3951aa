"""Spec declarations of Sudoku, TowerofHanoi, Game2048, Sokoban, Crosswords and WordSearch.

Light on purpose (see :mod:`gem_games.plugin`): ids, entry points and per-variant kwargs only.
Ids and easy/hard configurations (and their kwarg names) follow GEM's, so GEM ids and configs keep
their meaning. GEM registered ``game:Sokoban-v0-random`` with an unused ``room_size`` kwarg; here the
random variants draw their sizes from the env's RNG at every reset (``randomize=True``).
"""

from __future__ import annotations

from gem_core.registry import EnvAlias, EnvSpec

from gem_games._specs import game_variants

SPECS: list[EnvSpec | EnvAlias] = [
    *game_variants(
        "Sudoku",
        "gem_games.sudoku:SudokuEnv",
        {
            "easy": {"scale": 4, "clues": 10, "max_turns": 15},
            "hard": {"scale": 9, "clues": 50, "max_turns": 50},
            "random": {"randomize": True},
        },
        description="Fill a Sudoku with a unique solution, one digit per turn",
    ),
    *game_variants(
        "TowerofHanoi",
        "gem_games.tower_of_hanoi:TowerofHanoiEnv",
        {
            "easy": {"num_disks": 3, "max_turns": 10},
            "hard": {"num_disks": 5, "max_turns": 35},
            "random": {"randomize": True},
        },
        description="Move the tower of disks from peg A to peg C",
    ),
    *game_variants(
        "Game2048",
        "gem_games.game_2048:Game2048Env",
        {
            "easy": {"target_tile": 64, "max_turns": 50},
            "hard": {"target_tile": 512, "max_turns": 50},
            "extreme-hard": {"target_tile": 2048, "max_turns": 100},
            "random": {"randomize": True},
        },
        description="Slide and merge tiles on a 4x4 board to build the target tile",
    ),
    *game_variants(
        "Sokoban",
        "gem_games.sokoban:SokobanEnv",
        {
            "easy": {"dim_room": (6, 6), "num_boxes": 2, "max_turns": 20},
            "hard": {"dim_room": (8, 8), "num_boxes": 4, "max_turns": 50},
            "random": {"randomize": True},
        },
        description="Push every box onto a target in a generated, solvable room",
    ),
    *game_variants(
        "Crosswords",
        "gem_games.crosswords:CrosswordsEnv",
        {
            "easy": {"num_words": 3, "hardcore": False, "max_turns": 30},
            "hard": {"num_words": 3, "hardcore": True, "max_turns": 40},
            "random": {"randomize": True},
        },
        description="Solve a small crossword from its clues",
    ),
    *game_variants(
        "WordSearch",
        "gem_games.word_search:WordSearchEnv",
        {
            "easy": {"num_words": 5, "hardcore": False, "max_turns": 20},
            "hard": {"num_words": 5, "hardcore": True, "max_turns": 20},
            "random": {"randomize": True},
        },
        description="Find the listed words hidden in a letter grid",
    ),
]
