"""Crosswords: a small seeded crossword built from the shipped word list; fill in every letter.

Rewards follow GEM's ``game:Crosswords-v0-*``: ``1 / #letter cells`` per correct letter, so a
completed grid sums to exactly 1. A wrong letter or word is rejected (reward 0, the turn is spent).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from pydantic import Field

from gem_games._base import GameConfig, GameEnv, Outcome
from gem_games._words import WordClue, load_words

__all__ = ["CrosswordPuzzle", "CrosswordsConfig", "CrosswordsEnv", "Entry", "build_crossword"]

Pos = tuple[int, int]
_LETTER_MOVE = re.compile(r"^\(?\s*(\d{1,3})\s*[, ]\s*(\d{1,3})\s*\)?\s*[,:= ]?\s*([A-Za-z])$")
_WORD_MOVE = re.compile(r"^(\d{1,3})\s*-?\s*(across|down|a|d)\b\s*[,:=]?\s*([A-Za-z]+)$", re.IGNORECASE)


@dataclass(frozen=True)
class Entry:
    """One answer in the grid: its number, direction, start cell (0-based) and word."""

    number: int
    direction: str  # "across" or "down"
    start: Pos
    word: str
    clue: str

    def cells(self) -> list[Pos]:
        dr, dc = (0, 1) if self.direction == "across" else (1, 0)
        return [(self.start[0] + dr * i, self.start[1] + dc * i) for i in range(len(self.word))]


def _fits(letters: dict[Pos, str], word: str, start: Pos, across: bool) -> int | None:
    """Crossings if ``word`` can go at ``start`` without touching other words side by side, else ``None``."""
    dr, dc = (0, 1) if across else (1, 0)
    before, after = (start[0] - dr, start[1] - dc), (start[0] + dr * len(word), start[1] + dc * len(word))
    if before in letters or after in letters:
        return None
    crossings = 0
    for i, ch in enumerate(word):
        p = (start[0] + dr * i, start[1] + dc * i)
        if p in letters:
            if letters[p] != ch:
                return None
            crossings += 1
            continue
        # A new letter must not sit next to an existing one across the word's direction.
        side1, side2 = (p[0] + dc, p[1] + dr), (p[0] - dc, p[1] - dr)
        if side1 in letters or side2 in letters:
            return None
    return crossings


def build_crossword(pool: tuple[WordClue, ...], num_words: int, rng: random.Random, attempts: int = 50) -> list[Entry]:
    """Place ``num_words`` words from ``pool``, each crossing one already placed; numbered like a real crossword.

    Raises:
        ValueError: no crossword was found in ``attempts`` tries.
    """
    for _ in range(attempts):
        order = list(pool)
        rng.shuffle(order)
        first = order.pop()
        placed: list[tuple[WordClue, Pos, bool]] = [(first, (0, 0), True)]
        letters = {(0, i): ch for i, ch in enumerate(first.word)}
        for candidate in order:
            if len(placed) == num_words:
                break
            if any(candidate.word == w.word for w, _, _ in placed):
                continue
            spots: list[tuple[Pos, bool]] = []
            for word, (r0, c0), across in placed:
                for i, ch in enumerate(word.word):
                    for j, cj in enumerate(candidate.word):
                        if ch != cj:
                            continue
                        cell = (r0, c0 + i) if across else (r0 + i, c0)
                        start = (cell[0] - j, cell[1]) if across else (cell[0], cell[1] - j)
                        if _fits(letters, candidate.word, start, not across) == 1:
                            spots.append((start, not across))
            if spots:
                start, across = spots[rng.randrange(len(spots))]
                placed.append((candidate, start, across))
                dr, dc = (0, 1) if across else (1, 0)
                for i, ch in enumerate(candidate.word):
                    letters[(start[0] + dr * i, start[1] + dc * i)] = ch
        if len(placed) == num_words:
            return _number(placed)
    raise ValueError(f"could not build a crossword of {num_words} words from {len(pool)} candidates")


def _number(placed: list[tuple[WordClue, Pos, bool]]) -> list[Entry]:
    top = min(r for _, (r, _), _ in placed)
    left = min(c for _, (_, c), _ in placed)
    shifted = [(w, (r - top, c - left), across) for w, (r, c), across in placed]
    starts = sorted({start for _, start, _ in shifted})
    numbers = {start: i + 1 for i, start in enumerate(starts)}
    entries = [
        Entry(numbers[start], "across" if across else "down", start, w.word, w.clue) for w, start, across in shifted
    ]
    return sorted(entries, key=lambda e: (e.direction != "across", e.number))


@dataclass
class CrosswordPuzzle:
    """A crossword's answers and the letters filled in so far."""

    entries: list[Entry]
    filled: dict[Pos, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.solution: dict[Pos, str] = {p: ch for e in self.entries for p, ch in zip(e.cells(), e.word, strict=True)}
        self.rows = 1 + max(r for r, _ in self.solution)
        self.cols = 1 + max(c for _, c in self.solution)

    @property
    def solved(self) -> bool:
        return len(self.filled) == len(self.solution)

    def render(self) -> str:
        """The grid (``#`` blocked, ``_`` empty letter cell), then the clues with their current letters."""
        width = len(str(max(self.rows, self.cols)))
        header = " " * (width + 1) + " ".join(str(c + 1).rjust(width) for c in range(self.cols))
        lines = [header]
        for r in range(self.rows):
            cells = []
            for c in range(self.cols):
                p = (r, c)
                cells.append(("#" if p not in self.solution else self.filled.get(p, "_")).rjust(width))
            lines.append(f"{str(r + 1).rjust(width)} " + " ".join(cells))
        lines.append("")
        for direction in ("across", "down"):
            lines.append(f"{direction.capitalize()}:")
            for e in self.entries:
                if e.direction == direction:
                    now = "".join(self.filled.get(p, "_") for p in e.cells())
                    r, c = e.start
                    lines.append(
                        f"  {e.number} {direction} (row {r + 1}, column {c + 1}, {len(e.word)} letters): "
                        f"{e.clue}  [{now}]"
                    )
        return "\n".join(lines)

    def entry(self, number: int, direction: str) -> Entry | None:
        return next((e for e in self.entries if e.number == number and e.direction == direction), None)

    def place_letter(self, row: int, col: int, letter: str) -> tuple[int, str]:
        """Write one letter at 1-based ``(row, col)``; returns ``(new correct cells, feedback)``."""
        p = (row - 1, col - 1)
        if p not in self.solution:
            return 0, f"({row}, {col}) is not a letter cell of this crossword."
        if p in self.filled:
            return 0, f"({row}, {col}) is already filled with {self.filled[p]}."
        if self.solution[p] != letter:
            return 0, f"{letter} is not the letter at ({row}, {col})."
        self.filled[p] = letter
        return 1, f"{letter} at ({row}, {col}) is correct."

    def place_word(self, number: int, direction: str, word: str) -> tuple[int, str]:
        """Write a whole answer; returns ``(new correct cells, feedback)``."""
        e = self.entry(number, direction)
        if e is None:
            return 0, f"There is no {number} {direction} in this crossword."
        if len(word) != len(e.word):
            return 0, f"{number} {direction} has {len(e.word)} letters, not {len(word)}."
        if word != e.word:
            return 0, f"{word} is not the answer to {number} {direction}."
        new = [p for p in e.cells() if p not in self.filled]
        if not new:
            return 0, f"{number} {direction} is already complete."
        for p, ch in zip(e.cells(), e.word, strict=True):
            self.filled[p] = ch
        return len(new), f"{word} is correct for {number} {direction}."


class CrosswordsConfig(GameConfig):
    """Configuration of :class:`CrosswordsEnv`.

    Attributes:
        num_words: Answers in the crossword.
        hardcore: Draw rarer, longer words (the ``hard`` tier of the word list) instead of common ones.
        max_turns: Moves allowed (a move is one letter or one whole word).
        randomize: Draw ``num_words`` from 2..5, ``hardcore`` at random and ``max_turns = 10 * num_words``
            at every reset.
    """

    num_words: int = Field(3, ge=1, le=8)
    hardcore: bool = False
    max_turns: int = Field(30, ge=1, le=10_000)


class CrosswordsEnv(GameEnv[CrosswordsConfig]):
    """Solve a small crossword from its clues, a letter or a word per turn.

    Rewards: ``1 / #letter cells`` per newly correct letter (a whole word pays for its new letters), so
    the completed grid sums to exactly 1.0 (terminated, success). A wrong letter or word, a blocked cell,
    or an already filled cell is rejected: reward 0 and the turn is spent. A box that is neither
    ``row column letter`` nor ``number direction word`` is a format error.
    """

    config_model = CrosswordsConfig
    title = "Crosswords"

    def _draw_config(self) -> CrosswordsConfig:
        words = self.py_random.randint(2, 5)
        return self.config.model_copy(
            update={"num_words": words, "hardcore": self.py_random.random() < 0.5, "max_turns": 10 * words}
        )

    def _new_game(self) -> None:
        pool = load_words("hard" if self.params.hardcore else "basic")
        self.puzzle = CrosswordPuzzle(build_crossword(pool, self.params.num_words, self.py_random))

    def rules(self) -> str:
        return (
            "Solve the crossword. '_' is an empty letter cell and '#' is not part of the puzzle; rows and columns "
            "are numbered from 1. Each turn, write one letter ('row column letter', e.g. '2 3 A') or one whole "
            "answer ('number direction word', e.g. '1 across CAT'). Wrong letters and words are rejected."
        )

    def move_format(self) -> tuple[str, str]:
        return "'row column letter' or 'number across|down word'", "1 across CAT"

    def render(self) -> str:
        return self.puzzle.render()

    def _share(self, new_cells: int) -> float:
        total = len(self.puzzle.solution)
        before = len(self.puzzle.filled) - new_cells
        return len(self.puzzle.filled) / total - before / total

    def _play(self, content: str) -> Outcome:
        text = content.strip()
        if match := _LETTER_MOVE.match(text):
            row, col, letter = int(match[1]), int(match[2]), match[3].upper()
            parsed = f"{row} {col} {letter}"
            new, feedback = self.puzzle.place_letter(row, col, letter)
        elif match := _WORD_MOVE.match(text):
            direction = "across" if match[2].lower().startswith("a") else "down"
            number, word = int(match[1]), match[3].upper()
            parsed = f"{number} {direction} {word}"
            new, feedback = self.puzzle.place_word(number, direction, word)
        else:
            return Outcome(
                f"{content[:40]!r} is neither 'row column letter' nor 'number across|down word'.",
                status="format_error",
            )
        if not new:
            return Outcome(f"{feedback} That turn is lost.", parsed=parsed, invalid=True)
        reward = self._share(new)
        if self.puzzle.solved:
            return Outcome(f"{feedback} The crossword is complete.", reward, "won", parsed=parsed)
        return Outcome(feedback, reward, parsed=parsed)

    def expert_moves(self) -> list[str]:
        """A dictionary expert: looks each clue up in the shipped word list (by clue and length)."""
        by_clue: dict[tuple[str, int], str] = {(w.clue, len(w.word)): w.word for w in load_words()}
        moves = []
        for e in self.puzzle.entries:
            if all(p in self.puzzle.filled for p in e.cells()):
                continue
            moves.append(f"\\boxed{{{e.number} {e.direction} {by_clue[(e.clue, len(e.word))]}}}")
        return moves

    def expert_action(self) -> str:
        """The expert's next move (see :meth:`expert_moves`)."""
        return self.expert_moves()[0]

    def sample_random_action(self) -> str:
        r = self.py_random.randint(1, self.puzzle.rows)
        c = self.py_random.randint(1, self.puzzle.cols)
        return f"\\boxed{{{r} {c} {self.py_random.choice('ABCDEFGHIJKLMNOPQRSTUVWXYZ')}}}"
