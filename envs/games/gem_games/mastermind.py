"""Mastermind: crack a secret code of digits from black and white peg counts."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import ClassVar

from pydantic import Field, model_validator

from gem_games._base import GameConfig, GameEnv, Outcome, shorten

__all__ = ["MastermindConfig", "MastermindEnv", "all_codes", "score_code"]

_CODE = re.compile(r"[\d\s,;\-\[\]()]+")

Code = tuple[int, ...]


def score_code(guess: Sequence[int], secret: Sequence[int]) -> tuple[int, int]:
    """``(black, white)``: right symbol in the right place, and right symbol in another place."""
    black = sum(g == s for g, s in zip(guess, secret, strict=True))
    common = sum((Counter(guess) & Counter(secret)).values())
    return black, common - black


def all_codes(length: int, symbols: int, *, duplicates: bool) -> Iterator[Code]:
    """Every code of ``length`` symbols from ``1..symbols``, in lexicographic order."""
    digits = range(1, symbols + 1)
    if duplicates:
        return itertools.product(digits, repeat=length)
    return itertools.permutations(digits, length)


class MastermindConfig(GameConfig):
    """Configuration of :class:`MastermindEnv`.

    Attributes:
        code_length: Digits in the secret code (2 to 6).
        num_symbols: Digits are drawn from ``1..num_symbols`` (2 to 9); GEM's ``num_numbers`` is accepted too.
        allow_duplicates: A digit may appear more than once in the code; GEM's ``duplicate_numbers`` too.
        max_turns: Guesses allowed.
        randomize: Draw ``code_length`` from 2..4, ``num_symbols`` from 6..8 and
            ``max_turns = 10 * (code_length - 1)`` at every reset.
    """

    gem_aliases: ClassVar[dict[str, str]] = {"num_numbers": "num_symbols", "duplicate_numbers": "allow_duplicates"}

    code_length: int = Field(4, ge=2, le=6)
    num_symbols: int = Field(8, ge=2, le=9)
    allow_duplicates: bool = False
    max_turns: int = Field(30, ge=1, le=10_000)

    @model_validator(mode="after")
    def _check_symbols(self) -> MastermindConfig:
        if not self.allow_duplicates and self.num_symbols < self.code_length:
            raise ValueError(
                f"num_symbols ({self.num_symbols}) must be at least code_length ({self.code_length}) "
                "when allow_duplicates is false"
            )
        return self


class MastermindEnv(GameEnv[MastermindConfig]):
    """Guess the secret code; each guess is answered with black and white peg counts.

    Rewards (milestones): a guess with more black pegs than any before earns
    ``(black - best_black) / code_length``, so the solving guess completes a total of 1. A guess of the
    wrong length, with digits outside the range, or with repeats when the code has none, is an invalid move.
    """

    config_model = MastermindConfig
    title = "Mastermind"

    def _draw_config(self) -> MastermindConfig:
        length = int(self.np_random.integers(2, 5))
        symbols = int(self.np_random.integers(6, 9))
        return self.config.model_copy(
            update={"code_length": length, "num_symbols": symbols, "max_turns": 10 * (length - 1)}
        )

    def _new_game(self) -> None:
        p = self.params
        if p.allow_duplicates:
            draw = self.np_random.integers(1, p.num_symbols + 1, size=p.code_length)
        else:
            draw = self.np_random.permutation(p.num_symbols)[: p.code_length] + 1
        self.secret: Code = tuple(int(d) for d in draw)
        #: ``(guess, black, white)`` per scored guess.
        self.history: list[tuple[Code, int, int]] = []
        self.best_black = 0

    def rules(self) -> str:
        p = self.params
        repeats = "Digits may repeat." if p.allow_duplicates else "No digit appears twice."
        return (
            f"Crack the secret code: {p.code_length} digits, each from 1 to {p.num_symbols}. {repeats} "
            "After each guess you get black pegs (right digit in the right place) and "
            "white pegs (right digit in the wrong place)."
        )

    def move_format(self) -> tuple[str, str]:
        p = self.params
        example = " ".join(str(d) for d in range(1, p.code_length + 1))
        return f"{p.code_length} digits from 1 to {p.num_symbols} separated by spaces", example

    def render(self) -> str:
        if not self.history:
            return "Guesses so far: none."
        rows = [
            f"{i:>3}. {' '.join(map(str, g))}  ->  black {b}, white {w}" for i, (g, b, w) in enumerate(self.history, 1)
        ]
        return "Guesses so far:\n" + "\n".join(rows)

    def _play(self, content: str) -> Outcome:
        if not _CODE.fullmatch(content) or not any(c.isdigit() for c in content):
            return Outcome(f"{content[:40]!r} is not a code of digits.", status="format_error")
        digits = [int(c) for c in content if c.isdigit()]
        guess: Code = tuple(digits)
        shown = shorten(" ".join(map(str, guess)))
        p = self.params
        problem = None
        if len(guess) != p.code_length:
            problem = f"has {len(guess)} digits; the code has {p.code_length}"
        elif any(not 1 <= d <= p.num_symbols for d in guess):
            problem = f"uses a digit outside 1 to {p.num_symbols}"
        elif not p.allow_duplicates and len(set(guess)) != len(guess):
            problem = "repeats a digit, and the code has no repeats"
        if problem is not None:
            return Outcome(f"Your guess {shown} {problem}; that turn is lost.", parsed=shown, invalid=True)
        black, white = score_code(guess, self.secret)
        self.history.append((guess, black, white))
        reward = max(0, black - self.best_black) / p.code_length
        self.best_black = max(self.best_black, black)
        if black == p.code_length:
            return Outcome(f"{shown} cracks the code!", reward, "won", shown)
        return Outcome(f"{shown}: black {black}, white {white}.", reward, parsed=shown)

    def _on_truncation(self) -> tuple[float, str]:
        return 0.0, f"Out of turns: the code was {' '.join(map(str, self.secret))}."

    def expert_action(self) -> str:
        """The first code (in order) that agrees with every answer so far: classic elimination."""
        p = self.params
        for code in all_codes(p.code_length, p.num_symbols, duplicates=p.allow_duplicates):
            if all(score_code(guess, code) == (black, white) for guess, black, white in self.history):
                return f"\\boxed{{{' '.join(map(str, code))}}}"
        return self.sample_random_action()  # unreachable: the secret always agrees

    def sample_random_action(self) -> str:
        p = self.params
        if p.allow_duplicates:
            code = [self.py_random.randint(1, p.num_symbols) for _ in range(p.code_length)]
        else:
            code = self.py_random.sample(range(1, p.num_symbols + 1), p.code_length)
        return f"\\boxed{{{' '.join(map(str, code))}}}"
