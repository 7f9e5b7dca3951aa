r"""Machinery shared by every game: the ``\boxed{}`` action parser, reward constants and :class:`GameEnv`.

A game subclasses :class:`GameEnv` and implements five small methods:

* ``_new_game()``: draw a fresh puzzle from ``self.np_random`` / ``self.py_random``;
* ``_play(content)``: apply the text found in the agent's last ``\boxed{}`` and return an :class:`Outcome`;
* ``render()``: the whole current state (board, history) as text;
* ``rules()`` and ``move_format()``: the prompt text.

The base owns everything else, identically for all games: turn counting, the turn limit (``truncated``),
the format-error path (reward :data:`REWARD_FORMAT_ERROR`, episode terminated, an observation that says what
was expected), the observation layout (feedback, then the full board, then what to answer) and ``info``.
Nothing is hidden in ``info``: an observation alone is enough to play.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Literal, TypeVar

from gem_core.core import Env, ResetReturn, StepReturn, require_text_action
from gem_core.errors import ConfigError, ResetNeeded
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = [
    "REWARD_FORMAT_ERROR",
    "REWARD_INVALID_MOVE",
    "REWARD_STEP",
    "REWARD_SUCCESS",
    "GameConfig",
    "GameEnv",
    "Outcome",
    "extract_boxed",
    "normalize",
]

#: Reward of the move that wins the game (or the share of it left after partial credit).
REWARD_SUCCESS = 1.0
#: Reward of an action with no parsable answer; the episode terminates.
REWARD_FORMAT_ERROR = -0.1
#: Reward of a legal move that earns nothing.
REWARD_STEP = 0.0
#: Reward of a well-formed but illegal move (a repeated guess, a wall): the turn is spent.
REWARD_INVALID_MOVE = 0.0

# One pass over the text finds box openers and plain braces, so nesting is tracked without backtracking
# (an adversarial "\boxed{" * 1000 stays linear).
_BRACE_TOKENS = re.compile(r"\\(?:boxed|fbox)\s*\{|\{|\}", re.IGNORECASE)
# LaTeX wrappers models often put inside a box: \boxed{\text{up}}.
_WRAPPER = re.compile(r"^\\(?:text|textbf|textit|mathrm|mathbf|texttt|operatorname)\s*\{(.*)\}$", re.DOTALL)
_SPACES = re.compile(r"\s+")


def extract_boxed(text: str) -> str | None:
    r"""Return the content of the last complete ``\boxed{...}`` in ``text``, cleaned up.

    "Last" means the box whose closing brace comes last; braces inside it must balance
    (``\boxed{\frac{1}{2}}`` gives ``\frac{1}{2}``). A box nested in that box wins over its
    wrapper (``\boxed{\boxed{3}}`` gives ``3``). ``\fbox`` counts as a box, ``\text{}``-style
    wrappers and ``$`` are stripped, and runs of whitespace collapse to one space. Case is kept;
    games compare through :func:`normalize`.

    Args:
        text: The model's raw response.

    Returns:
        The cleaned content (possibly ``""`` for an empty box), or ``None`` when there is no closed box.
    """
    stack: list[int | None] = []  # content start of an open box, None for a plain "{"
    closed: list[tuple[int, int]] = []  # (start, end) of each complete box, in closing order
    for match in _BRACE_TOKENS.finditer(text):
        token = match.group()
        if token == "}":
            if stack:
                start = stack.pop()
                if start is not None:
                    closed.append((start, match.start()))
        elif token == "{":
            stack.append(None)
        else:
            stack.append(match.end())
    if not closed:
        return None
    # Walk back from the box that closes last; an earlier-closing box that starts inside the current one
    # is nested in it (boxes nest properly), so it replaces it. Linear, with no recursion to exhaust.
    start, end = closed[-1]
    for inner_start, inner_end in reversed(closed[:-1]):
        if inner_start >= start:
            start, end = inner_start, inner_end
    return _clean(text[start:end])


def _clean(content: str) -> str:
    content = content.strip().strip("$").strip()
    while (match := _WRAPPER.match(content)) is not None:
        content = match.group(1).strip()
    return _SPACES.sub(" ", content)


def normalize(content: str) -> str:
    """Lower-case ``content`` and collapse whitespace, for case- and space-tolerant comparisons."""
    return _SPACES.sub(" ", content.strip()).lower()


Status = Literal["continue", "won", "lost", "format_error"]


#: Longest boxed answer a game parses; longer ones are invalid moves, never echoed in full.
MAX_ANSWER_CHARS = 2_000


def shorten(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters (with an ellipsis), for echoing a move back in an observation."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Outcome:
    """What one move did, as returned by :meth:`GameEnv._play`.

    Attributes:
        feedback: One or two sentences for the agent about this move.
        reward: The reward of this move alone.
        status: ``continue``, ``won`` (terminates, success), ``lost`` (terminates, failure) or
            ``format_error`` (the box held something that is not a move; handled like a missing box).
        parsed: The move as the game understood it (``info["parsed_action"]``).
        invalid: The move was well-formed but illegal; the turn is spent.
    """

    feedback: str
    reward: float = REWARD_STEP
    status: Status = "continue"
    parsed: str | None = None
    invalid: bool = False


class GameConfig(BaseModel):
    r"""Settings every game has. Games extend it with their own fields.

    Attributes:
        max_turns: Moves allowed before the episode is truncated.
        randomize: Draw a new configuration (size, difficulty) from the env's RNG at every reset;
            the ``-random`` variants set it.
        answer_format: ``boxed`` reads the move from the last ``\boxed{}`` of the response;
            ``raw`` also accepts a reply that is just the move (a box, if present, still wins), which is
            handy for people playing with ``gem play ... --kw answer_format=raw``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: GEM's names for fields, accepted so that GEM configs keep working: ``{"min_number": "low"}``.
    gem_aliases: ClassVar[dict[str, str]] = {}

    max_turns: int = Field(10, ge=1, le=10_000)
    randomize: bool = False
    answer_format: Literal["boxed", "raw"] = "boxed"

    @model_validator(mode="before")
    @classmethod
    def _accept_gem_names(cls, data: Any) -> Any:
        # Later keys win, as in {**spec.kwargs, **overrides}: make(id, min_number=3) overrides the spec's low.
        if not isinstance(data, dict) or not cls.gem_aliases:
            return data
        renamed: dict[str, Any] = {}
        for key, value in data.items():
            name = str(key)
            renamed[cls.gem_aliases.get(name, name)] = value
        return renamed


C = TypeVar("C", bound=GameConfig)


class GameEnv(Env, Generic[C], abc.ABC):
    r"""Base of the turn-based text games.

    Subclasses set :attr:`config_model` and :attr:`title` and implement ``_new_game``, ``_play``,
    ``render``, ``rules``, ``move_format``, ``sample_random_action`` and ``expert_action``. They may override
    ``_draw_config`` (the ``randomize`` variant) and ``_on_truncation`` (partial credit when the
    turns run out).

    Episode rules, identical for every game:

    * ``terminated`` is true when the game is won, lost by its own rules (e.g. a mine), or on a format
      error; ``truncated`` is true when ``max_turns`` moves were made and none of those happened.
      The two are never both true.
    * A format error (no closed ``\boxed{}``, or a box whose content is not a move) gives
      :data:`REWARD_FORMAT_ERROR` and ends the episode; the observation quotes the expected format.
    * The rewards of an episode sum to at most 1.0.
    * ``info`` always has ``format_error`` and ``turn``; ``success`` is set on the last step;
      ``parsed_action`` and ``invalid_move`` when the box held a move.

    Args:
        **config: Fields of :attr:`config_model`; a bad value raises :class:`~gem_core.errors.ConfigError`.

    Attributes:
        config: The validated constructor configuration.
        params: The configuration of the current episode (``config``, or a draw from it when ``randomize``).
        turn: Moves made in the current episode.
        earned: Reward collected in the current episode (at most 1.0; format errors subtract).
    """

    # `gem play` builds games with these so a person can type "3 2 2" instead of "\boxed{3 2 2}".
    metadata: ClassVar[dict[str, Any]] = {"multi_turn": True, "play_kwargs": {"answer_format": "raw"}}
    config_model: ClassVar[type[GameConfig]] = GameConfig
    #: Human name of the game, first word of the first observation.
    title: ClassVar[str] = "Game"

    def __init__(self, **config: Any) -> None:
        try:
            validated = self.config_model.model_validate(config)
        except ValidationError as exc:
            from gem_core.registry import format_config_error

            raise ConfigError(format_config_error(f"configuration of {type(self).__name__}", exc)) from exc
        self.config: C = validated  # type: ignore[assignment]
        self.params: C = self.config
        self.turn = 0
        self.earned = 0.0
        self._started = False
        self._done = False

    # ------------------------------------------------------------------ hooks for games
    @abc.abstractmethod
    def _new_game(self) -> None:
        """Set up a new puzzle from ``self.params``, drawing only from the env's RNGs."""

    @abc.abstractmethod
    def _play(self, content: str) -> Outcome:
        """Apply one move; ``content`` is the cleaned text of the last box (see :func:`extract_boxed`)."""

    @abc.abstractmethod
    def render(self) -> str:
        """The full current state of the game as text (board, history); part of every observation."""

    @abc.abstractmethod
    def rules(self) -> str:
        """One paragraph with the goal and rules of the current episode."""

    @abc.abstractmethod
    def move_format(self) -> tuple[str, str]:
        """What a move is and one example move, e.g. ``("a whole number from 1 to 10", "5")``."""

    def _draw_config(self) -> C:
        """The configuration of a ``randomize`` episode; the default keeps ``self.config``."""
        return self.config

    def _on_truncation(self) -> tuple[float, str]:
        """Partial credit and a closing sentence when the turns run out without a win."""
        return 0.0, "Out of turns."

    # ------------------------------------------------------------------ Env API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        self.params = self._draw_config() if self.config.randomize else self.config
        self.turn = 0
        self.earned = 0.0
        self._started, self._done = True, False
        self._new_game()
        turns = self.params.max_turns
        obs = (
            f"{self.title}. {self.rules()}\n\n{self.render()}\n\n"
            f"You have {turns} turn{'s' if turns != 1 else ''}. {self._answer_hint()}"
        )
        return obs, {"turn": 0, "max_turns": turns}

    def step(self, action: str) -> StepReturn:
        if not self._started:
            raise ResetNeeded(f"{type(self).__name__}.step() called before reset(); call reset() first")
        if self._done:
            raise ResetNeeded(f"{type(self).__name__}: the episode is over; call reset() to start a new one")
        require_text_action(self, action, f"your reply, with {self.expected_action()}")
        self.turn += 1
        content = extract_boxed(action)
        if content is None and self.params.answer_format == "raw":
            content = _clean(action)
        if content is None:
            outcome = Outcome("I found no \\boxed{...} answer in your reply.", status="format_error")
        elif not content:
            outcome = Outcome("Your answer is empty.", status="format_error")
        elif len(content) > MAX_ANSWER_CHARS:  # no move is this long: do not parse it, nor echo it
            outcome = Outcome(
                f"Your answer is {len(content)} characters long; a move is at most {MAX_ANSWER_CHARS}. "
                "That turn is lost.",
                parsed=shorten(content),
                invalid=True,
            )
        else:
            outcome = self._play(content)
        return self._finish_step(outcome)

    def _finish_step(self, outcome: Outcome) -> StepReturn:
        info: dict[str, Any] = {"turn": self.turn, "format_error": outcome.status == "format_error"}
        if outcome.parsed is not None:
            info["parsed_action"] = outcome.parsed
            info["invalid_move"] = outcome.invalid
        if outcome.status == "format_error":
            self._done = True
            info["success"] = False
            obs = f"Format error: {outcome.feedback} Expected {self.expected_action()}. Game over.\n\n{self.render()}"
            return obs, REWARD_FORMAT_ERROR, True, False, info
        reward = outcome.reward
        terminated = outcome.status in ("won", "lost")
        truncated = not terminated and self.turn >= self.params.max_turns
        self._done = terminated or truncated  # before render(), so a finished board may show what was hidden
        if not self._done:
            self.earned += reward
            left = self.params.max_turns - self.turn
            hint = f"{left} turn{'s' if left != 1 else ''} left. {self._answer_hint()}"
            return f"{outcome.feedback}\n\n{self.render()}\n\n{hint}", reward, False, False, info
        if terminated:
            tail = "You won!" if outcome.status == "won" else "Game over: you lost."
        else:
            bonus, tail = self._on_truncation()
            reward += bonus
        self.earned += reward
        info["success"] = outcome.status == "won"
        return f"{outcome.feedback}\n\n{self.render()}\n\n{tail}", reward, terminated, truncated, info

    def expected_action(self) -> str:
        """The expected answer, quoted by prompts and format errors."""
        what, example = self.move_format()
        if self.params.answer_format == "raw":
            return f"{what}, e.g. {example}"
        return f"{what} inside \\boxed{{}}, e.g. \\boxed{{{example}}}"

    def _answer_hint(self) -> str:
        if self.params.answer_format == "raw":
            return f"Reply with only your move: {self.expected_action()}."
        return f"Think it through, then give your move as {self.expected_action()}."

    def sample_random_action(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} does not implement sample_random_action()")

    def expert_action(self) -> str:
        r"""A strong move from what the player can see (never the hidden answer), as a ``\boxed{}`` reply.

        Used by the tests and handy as a baseline or a hint. Games override it.

        Raises:
            NotImplementedError: the game has no expert.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement expert_action()")
