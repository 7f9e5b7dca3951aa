"""The dataset names of the pinned reasoning-gym release, listed statically.

``register_envs`` reads this list so ``gem list`` never imports reasoning_gym (slow and heavy).
Regenerate after changing the pin with ``python -m gem_rg.names``; a test checks the list
matches ``reasoning_gym.factory.DATASETS`` of the installed version.
"""

from __future__ import annotations

#: The reasoning-gym version this list was generated from (and the one gem-reasoning-gym pins).
REASONING_GYM_VERSION = "0.1.25"

#: ``reasoning_gym.factory.DATASETS`` keys, sorted.
DATASET_NAMES: tuple[str, ...] = (
    "ab",
    "acre",
    "advanced_geometry",
    "aiw",
    "arc_1d",
    "arc_agi",
    "base_conversion",
    "basic_arithmetic",
    "bf",
    "binary_alternation",
    "binary_matrix",
    "bitwise_arithmetic",
    "boxnet",
    "caesar_cipher",
    "calendar_arithmetic",
    "chain_sum",
    "circuit_logic",
    "codeio",
    "coin_flip",
    "color_cube_rotation",
    "complex_arithmetic",
    "composite",
    "count_bits",
    "count_primes",
    "countdown",
    "course_schedule",
    "cryptarithm",
    "decimal_arithmetic",
    "decimal_chain_sum",
    "dice",
    "emoji_mystery",
    "family_relationships",
    "figlet_font",
    "fraction_simplification",
    "futoshiki",
    "game_of_life",
    "game_of_life_halting",
    "gcd",
    "graph_color",
    "group_anagrams",
    "gsm_symbolic",
    "intermediate_integration",
    "isomorphic_strings",
    "jugs",
    "kakurasu",
    "knight_swap",
    "knights_knaves",
    "largest_island",
    "lcm",
    "leg_counting",
    "letter_counting",
    "letter_jumble",
    "list_functions",
    "mahjong_puzzle",
    "manipulate_matrix",
    "maze",
    "mini_sudoku",
    "modulo_grid",
    "n_queens",
    "needle_haystack",
    "number_filtering",
    "number_format",
    "number_sequence",
    "number_sorting",
    "palindrome_generation",
    "palindrome_partitioning",
    "path_star",
    "polynomial_equations",
    "polynomial_multiplication",
    "pool_matrix",
    "power_function",
    "prime_factorization",
    "products",
    "propositional_logic",
    "puzzle24",
    "quantum_lock",
    "ransom_note",
    "rearc",
    "rectangle_count",
    "rotate_matrix",
    "rotten_oranges",
    "rubiks_cube",
    "rush_hour",
    "self_reference",
    "sentence_reordering",
    "shortest_path",
    "simple_equations",
    "simple_geometry",
    "simple_integration",
    "sokoban",
    "spell_backward",
    "spiral_matrix",
    "string_insertion",
    "string_manipulation",
    "string_splitting",
    "string_synthesis",
    "sudoku",
    "survo",
    "syllogism",
    "time_intervals",
    "tower_of_hanoi",
    "tsumego",
    "word_ladder",
    "word_sequence_reversal",
    "word_sorting",
    "zebra_puzzles",
)


def _regenerate() -> str:  # pragma: no cover - maintenance helper
    from importlib.metadata import version
    from pathlib import Path

    import reasoning_gym

    text = Path(__file__).read_text()
    head, _, _ = text.partition("REASONING_GYM_VERSION = ")
    _, _, tail = text.partition("\n)\n")
    names = "".join(f'    "{n}",\n' for n in sorted(reasoning_gym.factory.DATASETS))
    new = (
        f'{head}REASONING_GYM_VERSION = "{version("reasoning-gym")}"\n\n'
        f"#: ``reasoning_gym.factory.DATASETS`` keys, sorted.\nDATASET_NAMES: tuple[str, ...] = (\n{names})\n{tail}"
    )
    Path(__file__).write_text(new)
    return new


if __name__ == "__main__":  # pragma: no cover
    _regenerate()
