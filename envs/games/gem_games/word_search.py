"""WordSearch: find the listed words hidden in a seeded letter grid.

Rewards follow GEM's ``game:WordSearch-v0-*``: ``1 / #words`` per word found, so finding all of
them sums to exactly 1. A segment that spells no hidden word is rejected (reward 0, the turn is spent).
"""

from __future__ import annotations

import math
import random
import re
import string
from dataclasses import dataclass, field

from pydantic import Field

from gem_games._base import GameConfig, GameEnv, Outcome
from gem_games._words import load_words

__all__ = ["WordGrid", "WordSearchConfig", "WordSearchEnv", "find_word", "generate_grid"]

Pos = tuple[int, int]
_INT = re.compile(r"\d+")
#: Across and down only; hardcore adds the diagonals and every backwards direction.
EASY_DIRECTIONS: tuple[Pos, ...] = ((0, 1), (1, 0))
ALL_DIRECTIONS: tuple[Pos, ...] = ((0, 1), (1, 0), (1, 1), (-1, 1), (0, -1), (-1, 0), (-1, -1), (1, -1))


def generate_grid(
    words: list[str], directions: tuple[Pos, ...], rng: random.Random, attempts: int = 200
) -> list[list[str]]:
    """A square grid holding every word along one of ``directions``, other cells random letters.

    The side starts at ``max(7, longest word, ceil(sqrt(2 * letters)))`` and grows until all words fit.
    """
    size = max(7, max(map(len, words)), math.ceil(math.sqrt(2 * sum(map(len, words)))))
    while True:
        for _ in range(attempts):
            grid = _place_all(words, size, directions, rng)
            if grid is not None:
                return [[ch or rng.choice(string.ascii_uppercase) for ch in row] for row in grid]
        size += 1


def _place_all(words: list[str], size: int, directions: tuple[Pos, ...], rng: random.Random) -> list[list[str]] | None:
    grid = [[""] * size for _ in range(size)]
    for word in sorted(words, key=len, reverse=True):
        spots = []
        for dr, dc in directions:
            for r in range(size):
                for c in range(size):
                    end_r, end_c = r + dr * (len(word) - 1), c + dc * (len(word) - 1)
                    if not (0 <= end_r < size and 0 <= end_c < size):
                        continue
                    if all(grid[r + dr * i][c + dc * i] in ("", ch) for i, ch in enumerate(word)):
                        spots.append((r, c, dr, dc))
        if not spots:
            return None
        r, c, dr, dc = spots[rng.randrange(len(spots))]
        for i, ch in enumerate(word):
            grid[r + dr * i][c + dc * i] = ch
    return grid


def find_word(grid: list[list[str]], word: str) -> tuple[Pos, Pos] | None:
    """The 0-based start and end of ``word`` in any of the eight directions, or ``None`` (the expert's search)."""
    size = len(grid)
    for r in range(size):
        for c in range(size):
            if grid[r][c] != word[0]:
                continue
            for dr, dc in ALL_DIRECTIONS:
                end = (r + dr * (len(word) - 1), c + dc * (len(word) - 1))
                if not (0 <= end[0] < size and 0 <= end[1] < size):
                    continue
                if all(grid[r + dr * i][c + dc * i] == ch for i, ch in enumerate(word)):
                    return (r, c), end
    return None


@dataclass
class WordGrid:
    """The letters, the words to find and the cells of words already found."""

    letters: list[list[str]]
    words: list[str]
    found: dict[str, list[Pos]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.letters)

    def render(self) -> str:
        """The grid with 1-based row/column numbers (letters of found words in lower case) and the word list."""
        found_cells = {p for cells in self.found.values() for p in cells}
        width = len(str(self.size))
        lines = [" " * (width + 1) + " ".join(str(c + 1).rjust(width) for c in range(self.size))]
        for r, row in enumerate(self.letters):
            cells = [(ch.lower() if (r, c) in found_cells else ch).rjust(width) for c, ch in enumerate(row)]
            lines.append(f"{str(r + 1).rjust(width)} " + " ".join(cells))
        todo = [w for w in self.words if w not in self.found]
        lines.append("")
        lines.append(f"Words to find: {', '.join(todo) if todo else 'none'}")
        lines.append(f"Found ({len(self.found)} of {len(self.words)}): {', '.join(self.found) or 'none yet'}")
        return "\n".join(lines)

    @staticmethod
    def parse(content: str) -> tuple[int, int, int, int] | None:
        """Read ``start_row start_col end_row end_col`` (1-based, any separators); ``None`` otherwise."""
        numbers = _INT.findall(content)
        if len(numbers) != 4 or any(len(n) > 3 for n in numbers):
            return None
        r1, c1, r2, c2 = (int(n) for n in numbers)
        return r1, c1, r2, c2

    def claim(self, r1: int, c1: int, r2: int, c2: int) -> tuple[str | None, str]:
        """Check the segment from ``(r1, c1)`` to ``(r2, c2)``; returns ``(word found or None, feedback)``."""
        n = self.size
        if not all(1 <= v <= n for v in (r1, c1, r2, c2)):
            return None, f"Rows and columns go from 1 to {n}."
        dr, dc = r2 - r1, c2 - c1
        if not (dr == 0 or dc == 0 or abs(dr) == abs(dc)):
            return None, f"({r1}, {c1}) to ({r2}, {c2}) is not a straight line across, down or diagonal."
        steps = max(abs(dr), abs(dc))
        sr, sc = (dr > 0) - (dr < 0), (dc > 0) - (dc < 0)
        cells = [(r1 - 1 + sr * i, c1 - 1 + sc * i) for i in range(steps + 1)]
        text = "".join(self.letters[r][c] for r, c in cells)
        for candidate in (text, text[::-1]):
            if candidate in self.words:
                if candidate in self.found:
                    return None, f"You already found {candidate}."
                self.found[candidate] = cells
                return candidate, f"Found {candidate}!"
        return None, f"({r1}, {c1}) to ({r2}, {c2}) reads {text}, which is not one of the words."


class WordSearchConfig(GameConfig):
    """Configuration of :class:`WordSearchEnv`.

    Attributes:
        num_words: Words hidden in the grid.
        hardcore: Rarer words (the ``hard`` tier of the word list), hidden in all eight directions
            (diagonals and backwards too) instead of only across and down.
        max_turns: Guesses allowed.
        randomize: Draw ``num_words`` from 3..7, ``hardcore`` at random and ``max_turns = 4 * num_words``
            at every reset.
    """

    num_words: int = Field(5, ge=1, le=20)
    hardcore: bool = False
    max_turns: int = Field(20, ge=1, le=10_000)


class WordSearchEnv(GameEnv[WordSearchConfig]):
    """Find every listed word in the grid by giving its first and last letter's positions.

    Rewards: ``1 / num_words`` per newly found word, so finding all sums to exactly 1.0 (terminated,
    success). A segment that is off the grid, not straight, already found or spells no listed word is
    rejected: reward 0 and the turn is spent. A box without four numbers is a format error.
    """

    config_model = WordSearchConfig
    title = "Word Search"

    def _draw_config(self) -> WordSearchConfig:
        words = self.py_random.randint(3, 7)
        return self.config.model_copy(
            update={"num_words": words, "hardcore": self.py_random.random() < 0.5, "max_turns": 4 * words}
        )

    def _new_game(self) -> None:
        p = self.params
        pool = [w.word for w in load_words("hard" if p.hardcore else "basic")]
        words = self.py_random.sample(pool, p.num_words)
        directions = ALL_DIRECTIONS if p.hardcore else EASY_DIRECTIONS
        self.grid = WordGrid(generate_grid(words, directions, self.py_random), sorted(words))

    def rules(self) -> str:
        where = (
            "in any of the eight directions, including diagonals and backwards"
            if self.params.hardcore
            else "left to right or top to bottom"
        )
        return (
            f"Find the listed words hidden in the letter grid; they run in straight lines {where}. Rows and "
            "columns are numbered from 1. Each turn, name one word by the row and column of its first letter "
            "and of its last letter. Letters of words you found are shown in lower case."
        )

    def move_format(self) -> tuple[str, str]:
        return "'start_row start_col end_row end_col'", "1 1 1 5"

    def render(self) -> str:
        return self.grid.render()

    def _play(self, content: str) -> Outcome:
        move = WordGrid.parse(content)
        if move is None:
            return Outcome(
                f"{content[:40]!r} is not four numbers 'start_row start_col end_row end_col'.", status="format_error"
            )
        parsed = " ".join(map(str, move))
        word, feedback = self.grid.claim(*move)
        if word is None:
            return Outcome(f"{feedback} That turn is lost.", parsed=parsed, invalid=True)
        total = len(self.grid.words)
        reward = len(self.grid.found) / total - (len(self.grid.found) - 1) / total
        if len(self.grid.found) == total:
            return Outcome(f"{feedback} That was the last word.", reward, "won", parsed=parsed)
        return Outcome(feedback, reward, parsed=parsed)

    def expert_moves(self) -> list[str]:
        """The expert scans the grid for each word still to find (all eight directions)."""
        moves = []
        for word in self.grid.words:
            if word in self.grid.found:
                continue
            spot = find_word(self.grid.letters, word)
            assert spot is not None, f"{word} was placed in the grid"
            (r1, c1), (r2, c2) = spot
            moves.append(f"\\boxed{{{r1 + 1} {c1 + 1} {r2 + 1} {c2 + 1}}}")
        return moves

    def expert_action(self) -> str:
        """The expert's next move (see :meth:`expert_moves`)."""
        return self.expert_moves()[0]

    def sample_random_action(self) -> str:
        n = self.grid.size
        return "\\boxed{" + " ".join(str(self.py_random.randint(1, n)) for _ in range(4)) + "}"
