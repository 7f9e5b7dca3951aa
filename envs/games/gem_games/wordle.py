"""Wordle: find a secret word; each guess is scored letter by letter."""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

from pydantic import Field

from gem_games._base import REWARD_SUCCESS, GameConfig, GameEnv, Outcome, normalize
from gem_games.words import words_of_length

__all__ = ["WordleConfig", "WordleEnv", "score_guess"]

#: Share of the reward paid for green letters; the rest is paid on the solve.
GREEN_SHARE = 0.5


def score_guess(guess: str, secret: str) -> str:
    """Wordle feedback: ``G`` right letter and spot, ``Y`` in the word elsewhere, ``X`` not (or no more copies).

    Greens are assigned first, then yellows left to right while unmatched copies remain, so a repeated
    letter is marked yellow only as many times as the secret still holds it.
    """
    marks = ["X"] * len(guess)
    unmatched = Counter(s for g, s in zip(guess, secret, strict=True) if g != s)
    for i, (g, s) in enumerate(zip(guess, secret, strict=True)):
        if g == s:
            marks[i] = "G"
        elif unmatched[g] > 0:
            marks[i] = "Y"
            unmatched[g] -= 1
    return "".join(marks)


class WordleConfig(GameConfig):
    """Configuration of :class:`WordleEnv`.

    Attributes:
        word_length: Letters in the secret word (3 to 7).
        max_turns: Guesses allowed.
        only_known_words: Refuse guesses that are not in the shipped word list (as an invalid move).
            GEM's ``only_real_words`` is accepted too; GEM's variants set it, ours leave it off because the
            shipped list is small.
        randomize: Draw ``word_length`` from 3..5 and ``max_turns = 5 * word_length`` at every reset.
    """

    gem_aliases: ClassVar[dict[str, str]] = {"only_real_words": "only_known_words"}

    word_length: int = Field(5, ge=3, le=7)
    max_turns: int = Field(25, ge=1, le=10_000)
    only_known_words: bool = False


class WordleEnv(GameEnv[WordleConfig]):
    """Guess the secret word. After each guess every letter is marked G, Y or X.

    Rewards: each position that turns green for the first time earns ``0.5 / word_length``; the
    solving guess earns its new greens plus 0.5, so a solved game sums to 1. A guess of the wrong
    length (or a repeated guess) is an invalid move; a box holding anything but letters is a format error.
    """

    config_model = WordleConfig
    title = "Wordle"

    def _draw_config(self) -> WordleConfig:
        length = int(self.np_random.integers(3, 6))
        return self.config.model_copy(update={"word_length": length, "max_turns": 5 * length})

    def _new_game(self) -> None:
        self.words = words_of_length(self.params.word_length)
        self.secret = self.words[int(self.np_random.integers(len(self.words)))]
        #: ``(guess, marks)`` per scored guess.
        self.history: list[tuple[str, str]] = []
        self.greens: set[int] = set()

    def rules(self) -> str:
        n = self.params.word_length
        return (
            f"Find the secret English word of {n} letters. After each guess every letter is marked: "
            "G = right letter in the right spot, Y = the letter is in the word but elsewhere, "
            "X = the letter is not in the word (or not that many times)."
        )

    def move_format(self) -> tuple[str, str]:
        n = self.params.word_length
        return f"a {n}-letter word", self.words[0]

    def render(self) -> str:
        if not self.history:
            return "Guesses so far: none."
        rows = [f"{i}. {' '.join(g.upper())}\n   {' '.join(m)}" for i, (g, m) in enumerate(self.history, 1)]
        absent = sorted(
            {g for guess, marks in self.history for g, m in zip(guess, marks, strict=True) if m == "X"}
            - {g for guess, marks in self.history for g, m in zip(guess, marks, strict=True) if m != "X"}
        )
        known = "".join(self.secret[i] if i in self.greens else "_" for i in range(self.params.word_length))
        lines = ["Guesses so far:", *rows, f"Known letters: {' '.join(known.upper())}"]
        if absent:
            lines.append(f"Not in the word: {', '.join(a.upper() for a in absent)}")
        return "\n".join(lines)

    def _play(self, content: str) -> Outcome:
        guess = normalize(content).replace(" ", "")
        n = self.params.word_length
        if not guess.isascii() or not guess.isalpha():
            return Outcome(f"{content[:40]!r} is not a word made of letters.", status="format_error")
        if len(guess) != n:
            return Outcome(f"{guess!r} has {len(guess)} letters; the word has {n}.", parsed=guess, invalid=True)
        if self.params.only_known_words and guess not in self.words:
            return Outcome(f"{guess!r} is not in my word list.", parsed=guess, invalid=True)
        if any(guess == g for g, _ in self.history):
            return Outcome(f"You already guessed {guess!r}.", parsed=guess, invalid=True)
        marks = score_guess(guess, self.secret)
        self.history.append((guess, marks))
        new_greens = {i for i, m in enumerate(marks) if m == "G"} - self.greens
        self.greens |= new_greens
        reward = GREEN_SHARE * len(new_greens) / n
        if guess == self.secret:
            return Outcome(f"{guess.upper()} is the word!", reward + REWARD_SUCCESS - GREEN_SHARE, "won", guess)
        return Outcome(f"{guess.upper()}: {' '.join(marks)}", reward, parsed=guess)

    def _on_truncation(self) -> tuple[float, str]:
        return 0.0, f"Out of turns: the word was {self.secret.upper()}."

    def expert_action(self) -> str:
        """The first listed word that would have produced every feedback so far."""
        for word in self.words:
            if all(score_guess(guess, word) == marks for guess, marks in self.history):
                return f"\\boxed{{{word}}}"
        return self.sample_random_action()  # unreachable: the secret is a listed word

    def sample_random_action(self) -> str:
        return f"\\boxed{{{self.py_random.choice(self.words)}}}"
