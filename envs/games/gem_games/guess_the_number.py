"""GuessTheNumber: find a secret whole number from "higher" / "lower" hints."""

from __future__ import annotations

import math
import re
from typing import ClassVar

from pydantic import Field, model_validator

from gem_games._base import REWARD_SUCCESS, GameConfig, GameEnv, Outcome

__all__ = ["GuessTheNumberConfig", "GuessTheNumberEnv"]

_INTEGER = re.compile(r"([+-]?)(\d+)(?:\.0*)?")
# More digits than this is out of any range we allow (and int() of a huge string is slow or refused).
_MAX_DIGITS = 12


class GuessTheNumberConfig(GameConfig):
    """Configuration of :class:`GuessTheNumberEnv`.

    Attributes:
        low: Smallest possible secret (GEM's name ``min_number`` is accepted too).
        high: Largest possible secret (GEM's name ``max_number`` is accepted too).
        max_turns: Guesses allowed.
        randomize: Draw ``low`` from 1..10, ``high`` from ``low+5..low+50`` and
            ``max_turns = ceil(sqrt(high - low)) + 1`` at every reset.
    """

    gem_aliases: ClassVar[dict[str, str]] = {"min_number": "low", "max_number": "high"}

    low: int = Field(1, ge=-(10**9), le=10**9)
    high: int = Field(10, ge=-(10**9), le=10**9)
    max_turns: int = Field(4, ge=1, le=10_000)

    @model_validator(mode="after")
    def _check_range(self) -> GuessTheNumberConfig:
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be smaller than high ({self.high})")
        return self


class GuessTheNumberEnv(GameEnv[GuessTheNumberConfig]):
    """Guess the secret number; every wrong guess is answered with "higher" or "lower".

    Rewards: 1.0 for the right guess (terminated). When the turns run out, the last in-range guess
    earns ``1 - |guess - secret| / (high - low)``. A box without a whole number is a format error;
    a whole number outside the range (0 included) is an invalid move that spends the turn.
    """

    config_model = GuessTheNumberConfig
    title = "Guess The Number"

    def _draw_config(self) -> GuessTheNumberConfig:
        low = int(self.np_random.integers(1, 11))
        high = low + int(self.np_random.integers(5, 51))
        turns = math.ceil(math.sqrt(high - low)) + 1
        return self.config.model_copy(update={"low": low, "high": high, "max_turns": turns})

    def _new_game(self) -> None:
        self.secret = int(self.np_random.integers(self.params.low, self.params.high + 1))
        #: ``(guess, hint)`` per in-range guess; hint is "higher", "lower" or "correct".
        self.history: list[tuple[int, str]] = []

    def rules(self) -> str:
        p = self.params
        return (
            f"I picked a secret whole number from {p.low} to {p.high} (inclusive). Guess it: after each wrong "
            "guess I tell you whether the secret is higher or lower."
        )

    def move_format(self) -> tuple[str, str]:
        p = self.params
        return f"one whole number from {p.low} to {p.high}", str((p.low + p.high) // 2)

    def render(self) -> str:
        if not self.history:
            return "Guesses so far: none."
        shown = ", ".join(f"{g} ({'correct' if h == 'correct' else f'secret is {h}'})" for g, h in self.history)
        return f"Guesses so far: {shown}."

    def _play(self, content: str) -> Outcome:
        match = _INTEGER.fullmatch(content)
        if match is None:
            return Outcome(f"{content[:40]!r} is not a whole number.", status="format_error")
        p = self.params
        sign, digits = match.groups()
        if len(digits.lstrip("0")) > _MAX_DIGITS:
            return Outcome(
                f"That number is outside the range {p.low} to {p.high}; that turn is lost.",
                parsed=content[:40],
                invalid=True,
            )
        guess = int(sign + digits)
        if not p.low <= guess <= p.high:
            return Outcome(
                f"{guess} is outside the range {p.low} to {p.high}; that turn is lost.",
                parsed=str(guess),
                invalid=True,
            )
        if guess == self.secret:
            self.history.append((guess, "correct"))
            return Outcome(f"{guess} is correct!", REWARD_SUCCESS, "won", parsed=str(guess))
        hint = "higher" if guess < self.secret else "lower"
        self.history.append((guess, hint))
        return Outcome(f"{guess} is wrong: the secret number is {hint} than {guess}.", parsed=str(guess))

    def _on_truncation(self) -> tuple[float, str]:
        reveal = f"Out of turns: the secret number was {self.secret}."
        if not self.history:
            return 0.0, reveal
        last = self.history[-1][0]
        span = self.params.high - self.params.low
        return 1.0 - abs(last - self.secret) / span, reveal

    def expert_action(self) -> str:
        """Bisect the interval that the hints so far leave open (at most ``ceil(log2(values)) + 1`` guesses)."""
        low, high = self.params.low, self.params.high
        for guess, hint in self.history:
            if hint == "higher":
                low = max(low, guess + 1)
            elif hint == "lower":
                high = min(high, guess - 1)
        return f"\\boxed{{{(low + high) // 2}}}"

    def sample_random_action(self) -> str:
        return f"\\boxed{{{self.py_random.randint(self.params.low, self.params.high)}}}"
