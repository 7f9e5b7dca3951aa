"""Typed trajectory records: :class:`Turn` and :class:`Episode`, with JSONL io.

A runner (e.g. :mod:`gem_core`'s episode runner) produces one :class:`Episode` per
rollout; the math in :mod:`gem_core.rl.returns` / :mod:`gem_core.rl.advantages` and
the sample builders in :mod:`gem_core.rl.layouts` consume them. Records are plain
dataclasses (cheap to build by the thousand) validated on construction, so a
malformed record fails where it is made, not deep inside a trainer.

Prompt convention: ``Turn.prompt_messages`` is the *whole* chat history the policy
was prompted with at that turn (system/user/assistant/tool dicts with ``role`` and
``content``), not only the new messages. The history is append-only across turns
for the token-in/token-out layout to work (see :mod:`gem_core.rl.layouts`).

The episode engine records those per-turn prompts as :class:`PrefixView` objects: each
turn's prompt is a prefix of the episode's final context (and history), so the turns
share one list instead of holding a copy each, and an episode's records grow linearly
with its length, not quadratically.
"""

from __future__ import annotations

import json
import math
import operator
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, TypeVar, overload

import numpy as np

from gem_core.chat import Message
from gem_core.errors import TrajectoryError
from gem_core.multimodal import Image, Observation, has_images, images_from_json, images_to_json

__all__ = [
    "SCHEMA",
    "Episode",
    "Message",
    "PrefixView",
    "Turn",
    "iter_jsonl",
    "read_jsonl",
    "start_state_id",
    "write_jsonl",
]

#: Schema tag written into every JSONL line, so future layouts can be told apart.
SCHEMA = "gem.episode/1"


T = TypeVar("T")


class PrefixView(Sequence[T]):
    """The first ``length`` items of a list that only ever grows at its end, read-only and without a copy.

    The episode engine's context (and message history) only grows by appending, so
    every turn's prompt is a prefix of it: a view holds a reference to that one list
    and a fixed length. Appending to the list never changes a view; changing an item
    below a view's length would, which is why the engine only appends.

    A view reads like the list it stands for: ``len``, indexing, slices (a slice is a
    new ``list``), iteration, ``==`` with lists, tuples and other views, ``+`` with
    lists (giving a list). :meth:`tolist` and ``numpy.asarray(view)`` copy it out;
    :meth:`Turn.to_dict` writes it as a plain list. Pickling keeps the sharing within
    one pickle (an episode's turns pickle the list once).

    Args:
        items: The shared list.
        length: How many of its first items the view shows; defaults to all of them now.

    Raises:
        ValueError: ``length`` is negative or longer than ``items``.
    """

    __slots__ = ("_items", "_length")
    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __init__(self, items: list[T], length: int | None = None) -> None:
        size = len(items) if length is None else operator.index(length)
        if not 0 <= size <= len(items):
            raise ValueError(f"a prefix view of a list of {len(items)} items cannot have length {size}")
        self._items = items
        self._length = size

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            if step > 0:  # indices() clamped start and stop into the view: the list's own slice is right
                return self._items[start:stop:step]
            return [self._items[i] for i in range(start, stop, step)]
        position = operator.index(index)
        if position < 0:
            position += self._length
        if not 0 <= position < self._length:
            raise IndexError(f"index {index} out of range for a prefix view of length {self._length}")
        return self._items[position]

    def __iter__(self) -> Iterator[T]:
        return islice(self._items, self._length)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PrefixView):
            if other._items is self._items:
                return other._length == self._length
            return len(other) == self._length and self.tolist() == other.tolist()
        if isinstance(other, (list, tuple)):
            return len(other) == self._length and self.tolist() == list(other)
        return NotImplemented

    def __add__(self, other: object) -> list[T]:
        if isinstance(other, (list, tuple, PrefixView)):
            return [*self, *other]
        return NotImplemented

    def __radd__(self, other: object) -> list[T]:
        if isinstance(other, (list, tuple)):
            return [*other, *self]
        return NotImplemented

    def __repr__(self) -> str:
        return f"PrefixView({self.tolist()!r})"

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError("a PrefixView cannot become an array without a copy")
        return np.asarray(self.tolist(), dtype=dtype)

    def tolist(self) -> list[T]:
        """A new list of the view's items."""
        return self._items[: self._length]

    def shares_items(self, other: object) -> bool:
        """Whether ``other`` is a view of the same list (then the shorter one is a prefix of the longer)."""
        return isinstance(other, PrefixView) and other._items is self._items


def _plain_list(value: Any) -> Any:
    return value.tolist() if isinstance(value, PrefixView) else value


def start_state_id(env_id: str | None, seed: int | None) -> str:
    """The group id of episodes that start from the same state: ``"{env_id}/seed={seed}"``.

    Every runner and adapter names start states this way, so GRPO/RLOO groups and
    conformance checks agree across trainers.
    """
    return f"{env_id or 'env'}/seed={seed}"


@dataclass(slots=True)
class Turn:
    """One step of an episode: what the policy saw, what it did, what the env answered.

    Attributes:
        observation: The env observation this action answers (``reset``'s for turn 0).
        action: The action text sent to ``env.step``.
        reward: The reward ``env.step`` returned for this action (finite).
        terminated: ``env.step`` said the episode reached a terminal state.
        truncated: ``env.step`` said the episode was cut (turn budget, timeout).
        next_observation: The env's reply to the action (``step``'s observation).
        info: ``step``'s info dict (must be JSON-serialisable to write JSONL).
        prompt_messages: The full chat history the policy was prompted with, if it was
            prompted with messages (the episode engine records a :class:`PrefixView` of
            its history).
        prompt_token_ids: The exact token ids the policy was prompted with, if known
            (a token-in/token-out runner records them; the episode engine records a
            :class:`PrefixView` of its context).
        action_token_ids: The token ids the policy generated (including its stop token,
            if the inference server returns it), if known.
        action_logprobs: Log-probabilities of ``action_token_ids`` under the sampling policy.
        stop_reason: Why generation stopped: ``"stop"`` (the model ended its turn) or
            ``"length"`` (cut at the token limit: the episode engine then sends
            :data:`~gem_core.episode.INVALID_ACTION` by default); ``None`` if unknown.
        policy_versions: The version of the policy that sampled each of ``action_token_ids``
            (one per token), if the rollout records versions. A turn whose generation was
            paused for a weight update and resumed holds more than one version; off-policy
            corrections and staleness bounds read it. ``action_logprobs`` are then the
            behaviour logprobs: each under the version that sampled its token.
        prompt_images: The images of the prompt, in the order their tokens appear in
            ``prompt_token_ids`` (token mode with a processor; the episode engine records a
            :class:`PrefixView` of its image list), if the prompt held any.
        resumed_at: Where this turn's generation was aborted (a weight update) and resumed
            under new weights, as offsets into ``action_token_ids``, one per abort, in order
            (non-decreasing, each in ``[0, len(action_token_ids)]``): ``[5]`` means tokens
            0-4 came from the first request and the rest from its continuation, whose
            prompt was the context plus those 5 ids. ``None``: never aborted (or unrecorded).
    """

    observation: Observation
    action: str
    reward: float
    terminated: bool = False
    truncated: bool = False
    next_observation: Observation = ""
    info: dict[str, Any] = field(default_factory=dict)
    prompt_messages: Sequence[Message] | None = None
    prompt_token_ids: Sequence[int] | None = None
    action_token_ids: list[int] | None = None
    action_logprobs: list[float] | None = None
    stop_reason: str | None = None
    policy_versions: list[int] | None = None
    resumed_at: list[int] | None = None
    prompt_images: Sequence[Image] | None = None

    def __post_init__(self) -> None:
        try:
            self.reward = float(self.reward)
        except (TypeError, ValueError):
            raise TrajectoryError(f"Turn.reward must be a number, got {self.reward!r}") from None
        if not math.isfinite(self.reward):
            raise TrajectoryError(f"Turn.reward must be finite, got {self.reward}; clip or fix the env's reward")
        if self.action_logprobs is not None:
            if self.action_token_ids is None:
                raise TrajectoryError("Turn.action_logprobs is set but action_token_ids is None; record both")
            if len(self.action_logprobs) != len(self.action_token_ids):
                raise TrajectoryError(
                    f"Turn has {len(self.action_logprobs)} action_logprobs for {len(self.action_token_ids)} "
                    "action_token_ids; they must have one logprob per generated token"
                )
        if self.policy_versions is not None:
            if self.action_token_ids is None:
                raise TrajectoryError("Turn.policy_versions is set but action_token_ids is None; record both")
            if len(self.policy_versions) != len(self.action_token_ids):
                raise TrajectoryError(
                    f"Turn has {len(self.policy_versions)} policy_versions for {len(self.action_token_ids)} "
                    "action_token_ids; they must have one version per generated token"
                )
        if self.resumed_at is not None:
            self._check_resumed_at()
        if self.prompt_messages is not None:
            for i, message in enumerate(self.prompt_messages):
                if not isinstance(message, Mapping) or "role" not in message:
                    raise TrajectoryError(
                        f"Turn.prompt_messages[{i}] must be a dict with a 'role' key, got {message!r}"
                    )

    def _check_resumed_at(self) -> None:
        assert self.resumed_at is not None
        if self.action_token_ids is None:
            raise TrajectoryError("Turn.resumed_at is set but action_token_ids is None; record both")
        size, previous = len(self.action_token_ids), 0
        for offset in self.resumed_at:
            if not isinstance(offset, int) or isinstance(offset, bool) or not previous <= offset <= size:
                raise TrajectoryError(
                    f"Turn.resumed_at must hold non-decreasing int offsets in [0, {size}] (the action's "
                    f"length), got {self.resumed_at!r}"
                )
            previous = offset

    @property
    def done(self) -> bool:
        """Whether the episode ended at this turn (terminated or truncated)."""
        return self.terminated or self.truncated

    @property
    def policy_version(self) -> int | None:
        """The oldest policy version that sampled a token of this action (``None`` if unrecorded or empty)."""
        return min(self.policy_versions) if self.policy_versions else None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (optional fields that are ``None`` are left out; views become lists)."""
        out: dict[str, Any] = {
            "observation": self.observation,
            "action": self.action,
            "reward": self.reward,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "next_observation": self.next_observation,
            "info": self.info,
        }
        for name in (
            "prompt_messages",
            "prompt_token_ids",
            "action_token_ids",
            "action_logprobs",
            "stop_reason",
            "policy_versions",
            "resumed_at",
            "prompt_images",
        ):
            value = getattr(self, name)
            if value is not None:
                out[name] = _plain_list(value)
        if has_images(out):  # images inline as base64 ({"$image": ...}); from_dict reads them back
            out = images_to_json(out)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Turn:
        """Build a turn from :meth:`to_dict`'s output; unknown keys are an error."""
        unknown = set(data) - _TURN_FIELDS
        if unknown:
            raise TrajectoryError(f"unknown Turn field(s) {sorted(unknown)}; known: {sorted(_TURN_FIELDS)}")
        missing = {"observation", "action", "reward"} - set(data)
        if missing:
            raise TrajectoryError(f"Turn record lacks required field(s) {sorted(missing)}")
        return cls(**images_from_json(dict(data)))


_TURN_FIELDS = frozenset(Turn.__dataclass_fields__)


@dataclass(slots=True)
class Episode:
    """One rollout: its turns in order plus what identifies where it started.

    Attributes:
        turns: The turns, first to last.
        start_state_id: Identifies the start state (e.g. ``"game:Sudoku-v0/seed=17"``);
            episodes with the same id form one group for GRPO/RLOO baselines.
        episode_id: A unique id of this rollout.
        env_id: The registered env id, if known.
        seed: The seed passed to ``reset``, if any.
        metadata: Anything else worth keeping (policy version, timing); JSON-serialisable.
    """

    turns: list[Turn]
    start_state_id: str
    episode_id: str = ""
    env_id: str | None = None
    seed: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.start_state_id, str) or not self.start_state_id:
            raise TrajectoryError(
                f"Episode.start_state_id must be a non-empty str, got {self.start_state_id!r}; "
                "use e.g. f'{env_id}/seed={seed}' so rollouts of one start state group together"
            )
        for i, turn in enumerate(self.turns):
            if not isinstance(turn, Turn):
                raise TrajectoryError(f"Episode.turns[{i}] must be a Turn, got {type(turn).__name__}")

    @property
    def num_turns(self) -> int:
        """Number of turns."""
        return len(self.turns)

    @property
    def rewards(self) -> np.ndarray:
        """Per-turn rewards as a float64 array."""
        return np.fromiter((t.reward for t in self.turns), dtype=np.float64, count=len(self.turns))

    @property
    def total_reward(self) -> float:
        """Undiscounted sum of the turn rewards."""
        return math.fsum(t.reward for t in self.turns)

    @property
    def terminated(self) -> bool:
        """Whether the last turn reached a terminal state."""
        return bool(self.turns) and self.turns[-1].terminated

    @property
    def truncated(self) -> bool:
        """Whether the last turn was cut short."""
        return bool(self.turns) and self.turns[-1].truncated

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict, tagged with :data:`SCHEMA`."""
        return {
            "schema": SCHEMA,
            "episode_id": self.episode_id,
            "start_state_id": self.start_state_id,
            "env_id": self.env_id,
            "seed": self.seed,
            "metadata": self.metadata,
            "turns": [t.to_dict() for t in self.turns],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Episode:
        """Build an episode from :meth:`to_dict`'s output."""
        schema = data.get("schema", SCHEMA)
        if schema != SCHEMA:
            raise TrajectoryError(f"unsupported episode schema {schema!r}; this gem_core reads {SCHEMA!r}")
        if "start_state_id" not in data or "turns" not in data:
            raise TrajectoryError("an episode record needs 'start_state_id' and 'turns'")
        turns_data = data["turns"]
        if not isinstance(turns_data, list):
            raise TrajectoryError(f"episode 'turns' must be a list, got {type(turns_data).__name__}")
        return cls(
            turns=[Turn.from_dict(t) for t in turns_data],
            start_state_id=data["start_state_id"],
            episode_id=data.get("episode_id", ""),
            env_id=data.get("env_id"),
            seed=data.get("seed"),
            metadata=dict(data.get("metadata") or {}),
        )

    def to_json(self) -> str:
        """Serialise to one JSON line (numpy scalars and arrays become plain JSON)."""
        try:
            return json.dumps(self.to_dict(), ensure_ascii=False, allow_nan=False, default=_json_default)
        except (TypeError, ValueError) as exc:
            raise TrajectoryError(
                f"episode {self.episode_id!r} is not JSON-serialisable: {exc}; "
                "keep info/metadata to str, numbers, bools, lists and dicts"
            ) from exc

    @classmethod
    def from_json(cls, line: str) -> Episode:
        """Parse one JSON line written by :meth:`to_json`."""
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TrajectoryError(f"not a JSON episode record: {exc}") from exc
        if not isinstance(data, dict):
            raise TrajectoryError(f"an episode record must be a JSON object, got {type(data).__name__}")
        return cls.from_dict(data)


def _json_default(value: Any) -> Any:
    # numpy values leak into info dicts all the time (rewards, counts); write them as plain JSON.
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (np.ndarray, PrefixView)):
        return value.tolist()
    raise TypeError(f"object of type {type(value).__name__} is not JSON serializable")


def write_jsonl(episodes: Iterable[Episode], path: str | os.PathLike[str], *, append: bool = False) -> int:
    """Write episodes as JSON lines.

    Args:
        episodes: The episodes to write.
        path: Destination file.
        append: Append to ``path`` instead of replacing it.

    Returns:
        The number of episodes written.
    """
    count = 0
    with open(path, "a" if append else "w", encoding="utf-8") as handle:
        for episode in episodes:
            handle.write(episode.to_json())
            handle.write("\n")
            count += 1
    return count


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[Episode]:
    """Yield the episodes of a JSONL file one by one; blank lines are skipped.

    Raises:
        TrajectoryError: A line is not a valid episode; the message names file and line.
    """
    with open(path, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield Episode.from_json(line)
            except TrajectoryError as exc:
                raise TrajectoryError(f"{os.fspath(path)}:{lineno}: {exc}") from exc


def read_jsonl(path: str | os.PathLike[str]) -> list[Episode]:
    """Read every episode of a JSONL file written by :func:`write_jsonl`."""
    return list(iter_jsonl(path))
