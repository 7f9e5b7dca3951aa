"""A cooperative game with hidden information: a speaker who sees the secret gives a clue, a listener guesses."""

from __future__ import annotations

import re
from typing import Any

from gem_core.multiagent import MultiAgentEnv, MultiResetReturn, MultiStepReturn, TurnBasedEnv

__all__ = ["WORDS", "Clues", "scripted_listener", "scripted_speaker"]

#: Each candidate word and the clue words that describe it.
WORDS: dict[str, tuple[str, ...]] = {
    "apple": ("fruit", "red", "tree", "round"),
    "banana": ("fruit", "yellow", "long", "tropical"),
    "cherry": ("fruit", "red", "small", "tree"),
    "lemon": ("fruit", "yellow", "sour", "tree"),
    "carrot": ("vegetable", "orange", "long", "root"),
    "tomato": ("vegetable", "red", "round", "sauce"),
    "pumpkin": ("vegetable", "orange", "round", "big"),
    "onion": ("vegetable", "round", "layers", "sharp"),
    "whale": ("animal", "sea", "big", "mammal"),
    "shark": ("animal", "sea", "fish", "sharp"),
    "mouse": ("animal", "small", "mammal", "grey"),
    "canary": ("animal", "yellow", "small", "bird"),
}
_WORD = re.compile(r"[a-z]+")


class Clues(TurnBasedEnv):
    """The ``speaker`` sees which of ``num_candidates`` words is the secret; the ``listener`` sees only the candidates.

    The speaker answers with one clue word (the last word of its reply), which must not be a
    candidate: saying a candidate (the secret above all) ends the game at 0 with ``illegal_move``.
    The listener then names one candidate; naming several, or none, is a miss. Both agents get the
    same reward: 1 for a right guess, else 0 (cooperative).

    Args:
        num_candidates: Words on the table (2..12).
    """

    metadata = {"multi_turn": True, "cooperative": True}
    possible_agents = ("speaker", "listener")

    def __init__(self, num_candidates: int = 4) -> None:
        if not 2 <= num_candidates <= len(WORDS):
            raise ValueError(f"num_candidates must be in 2..{len(WORDS)}, got {num_candidates}")
        self.num_candidates = num_candidates
        self.candidates: list[str] = []
        self.secret = ""
        self.clue = ""

    def _reset(self, options: dict[str, Any] | None) -> MultiResetReturn:
        names = list(WORDS)
        picks = self.np_random.choice(len(names), size=self.num_candidates, replace=False)
        self.candidates = [names[int(i)] for i in picks]
        self.secret = self.candidates[int(self.np_random.integers(self.num_candidates))]
        self.clue = ""
        self._selection = "speaker"
        table = ", ".join(self.candidates)
        return {
            "speaker": (
                f"Cooperative clue game. The words on the table: {table}. The secret word is {self.secret}. "
                "Give your partner one clue word (not a word on the table) so they pick the secret."
            ),
            "listener": (
                f"Cooperative clue game. The words on the table: {table}. Your partner knows which one is the "
                "secret and will give you a one-word clue; then name exactly one word from the table."
            ),
        }, {}

    def _turn(self, agent: str, action: str) -> MultiStepReturn:
        words = _WORD.findall(action[-300:].lower())
        if agent == "speaker":
            if not words:
                return self._end(0.0, "the speaker gave no clue", {"speaker": {"format_error": True}})
            clue = words[-1]
            if clue in self.candidates:
                return self._end(0.0, f"the clue {clue!r} is a word on the table", {"speaker": {"illegal_move": True}})
            self.clue = clue
            self._selection = "listener"
            return (
                {"speaker": f"You said: {clue}.", "listener": f"Your partner's clue: {clue}. Which word?"},
                {},
                {},
                {},
                {"speaker": {"parsed_action": clue}},
            )
        named = [w for w in dict.fromkeys(words) if w in self.candidates]
        if len(named) != 1:
            why = "named no word from the table" if not named else f"named several words ({', '.join(named)})"
            return self._end(0.0, f"the listener {why}", {"listener": {"format_error": not named}})
        guess = named[0]
        right = guess == self.secret
        return self._end(1.0 if right else 0.0, f"the listener picked {guess}; the secret was {self.secret}", {})

    def _end(self, reward: float, why: str, extra: dict[str, dict[str, Any]]) -> MultiStepReturn:
        text = f"Game over: {why}."
        infos = {a: {"success": reward > 0, **extra.get(a, {})} for a in self.possible_agents}
        both = dict.fromkeys(self.possible_agents, True)
        return dict.fromkeys(self.possible_agents, text), dict.fromkeys(self.possible_agents, reward), both, {}, infos

    def sample_random_action(self, agent: str) -> str:
        pool = sorted({t for tags in WORDS.values() for t in tags}) if agent == "speaker" else self.candidates
        return pool[int(self.np_random.integers(len(pool)))]


def scripted_speaker(env: MultiAgentEnv, agent: str, observation: str) -> str:
    """Reference speaker: the secret's tag shared by the fewest other candidates (ties: the tag listed first)."""
    game = env.unwrapped
    assert isinstance(game, Clues)
    others = [w for w in game.candidates if w != game.secret]
    return min(WORDS[game.secret], key=lambda tag: sum(tag in WORDS[w] for w in others))


def scripted_listener(env: MultiAgentEnv, agent: str, observation: str) -> str:
    """Reference listener: the first candidate the clue describes (the first candidate when none does)."""
    game = env.unwrapped
    assert isinstance(game, Clues)
    matches = [w for w in game.candidates if game.clue in WORDS[w]]
    return (matches or game.candidates)[0]
