"""Hangman: reveal a secret word by guessing letters (or the whole word)."""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pydantic import Field

from gem_games._base import REWARD_SUCCESS, GameConfig, GameEnv, Outcome, normalize
from gem_games.words import words_of_length

__all__ = ["HangmanConfig", "HangmanEnv"]

#: Share of the reward paid for revealed letters; the rest is paid on the solve.
LETTER_SHARE = 0.5


class HangmanConfig(GameConfig):
    """Configuration of :class:`HangmanEnv`.

    Attributes:
        word_length: Letters in the secret word (3 to 7).
        max_turns: Guesses allowed (letters and words alike).
        hardcore: Accepted for GEM configs, which all set it false; true is refused (no rare-word list ships).
        randomize: Draw ``word_length`` from 3..7 and ``max_turns = (5 * word_length + 5) // 2`` at every reset.
    """

    word_length: int = Field(5, ge=3, le=7)
    max_turns: int = Field(15, ge=1, le=10_000)
    hardcore: Literal[False] = Field(
        False, description="GEM's switch to rarer words; only false is supported (one shipped word list)"
    )


class HangmanEnv(GameEnv[HangmanConfig]):
    """Guess letters of a secret word, or the whole word.

    Rewards: a letter earns ``0.5 * positions_revealed / word_length``; revealing the last letter adds
    0.5. Guessing the whole word earns 0.5 times the share still hidden, plus 0.5. A solved game sums
    to 1. A repeated letter or a word of the wrong length is an invalid move.
    """

    config_model = HangmanConfig
    title = "Hangman"

    def _draw_config(self) -> HangmanConfig:
        length = int(self.np_random.integers(3, 8))
        return self.config.model_copy(update={"word_length": length, "max_turns": (5 * length + 5) // 2})

    def _new_game(self) -> None:
        words = words_of_length(self.params.word_length)
        self.secret = words[int(self.np_random.integers(len(words)))]
        self.revealed = [False] * len(self.secret)
        self.letters: list[str] = []  # guessed letters, in order
        self.wrong_words: list[str] = []

    def rules(self) -> str:
        return (
            f"Find the secret English word of {self.params.word_length} letters. Guess one letter per turn: "
            "every copy of it in the word is revealed. You may also guess the whole word."
        )

    def move_format(self) -> tuple[str, str]:
        return "one letter or the whole word", "e"

    @property
    def pattern(self) -> str:
        """The word as the player sees it, ``_`` for hidden letters."""
        return "".join(c if shown else "_" for c, shown in zip(self.secret, self.revealed, strict=True))

    def render(self) -> str:
        wrong = [c for c in self.letters if c not in self.secret]
        lines = [f"Word: {' '.join(self.pattern.upper())}"]
        lines.append(f"Letters guessed: {', '.join(c.upper() for c in self.letters) or 'none'}")
        if wrong:
            lines.append(f"Not in the word: {', '.join(c.upper() for c in wrong)}")
        if self.wrong_words:
            lines.append(f"Wrong words: {', '.join(w.upper() for w in self.wrong_words)}")
        return "\n".join(lines)

    def _play(self, content: str) -> Outcome:
        guess = normalize(content).replace(" ", "")
        n = len(self.secret)
        if not guess.isascii() or not guess.isalpha():
            return Outcome(f"{content[:40]!r} is not a letter or a word.", status="format_error")
        if len(guess) == 1:
            return self._guess_letter(guess)
        if len(guess) != n:
            return Outcome(f"{guess!r} has {len(guess)} letters; the word has {n}.", parsed=guess, invalid=True)
        if guess != self.secret:
            self.wrong_words.append(guess)
            return Outcome(f"{guess.upper()} is not the word.", parsed=guess)
        hidden = self.revealed.count(False)
        self.revealed = [True] * n
        reward = LETTER_SHARE * hidden / n + REWARD_SUCCESS - LETTER_SHARE
        return Outcome(f"{guess.upper()} is the word!", reward, "won", guess)

    def _guess_letter(self, letter: str) -> Outcome:
        if letter in self.letters:
            return Outcome(f"You already guessed {letter.upper()}.", parsed=letter, invalid=True)
        self.letters.append(letter)
        newly = [i for i, c in enumerate(self.secret) if c == letter and not self.revealed[i]]
        if not newly:
            return Outcome(f"{letter.upper()} is not in the word.", parsed=letter)
        for i in newly:
            self.revealed[i] = True
        reward = LETTER_SHARE * len(newly) / len(self.secret)
        count = f"{len(newly)} time{'s' if len(newly) > 1 else ''}"
        if all(self.revealed):
            return Outcome(
                f"{letter.upper()} completes the word!", reward + REWARD_SUCCESS - LETTER_SHARE, "won", letter
            )
        return Outcome(f"{letter.upper()} is in the word {count}.", reward, parsed=letter)

    def _on_truncation(self) -> tuple[float, str]:
        return 0.0, f"Out of turns: the word was {self.secret.upper()}."

    def fitting_words(self) -> list[str]:
        """Listed words that agree with the revealed pattern, the letters tried and the words ruled out."""
        pattern, tried = self.pattern, set(self.letters)
        return [
            w
            for w in words_of_length(len(pattern))
            if all(p in ("_", c) for p, c in zip(pattern, w, strict=True))
            and not any(c in tried and p == "_" for p, c in zip(pattern, w, strict=True))
            and w not in self.wrong_words
        ]

    def expert_action(self) -> str:
        """Guess the word when at most two fit, else the letter that leaves the fewest words expected."""
        fits = self.fitting_words()
        if len(fits) <= 2:
            return f"\\boxed{{{fits[0]}}}"

        def expected_left(letter: str) -> int:
            groups = Counter(tuple(i for i, c in enumerate(w) if c == letter) for w in fits)
            return sum(n * n for n in groups.values())

        letters = sorted({c for w in fits for c in w} - set(self.letters))
        return f"\\boxed{{{min(letters, key=expected_left)}}}"

    def sample_random_action(self) -> str:
        return f"\\boxed{{{self.py_random.choice('abcdefghijklmnopqrstuvwxyz')}}}"
