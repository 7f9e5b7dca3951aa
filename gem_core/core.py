"""The text environment contract: :class:`Env`, :class:`AsyncEnv` and bridges between them."""

from __future__ import annotations

import abc
import asyncio
import functools
import inspect
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

import numpy as np

from gem_core.errors import InvalidAction, ResetNeeded
from gem_core.loop import LoopThread
from gem_core.multimodal import Observation

if TYPE_CHECKING:
    from gem_core.registry import EnvSpec

__all__ = [
    "RESERVED_INFO_KEYS",
    "AsyncEnv",
    "Env",
    "ResetReturn",
    "StepReturn",
    "ends_episode",
    "enforce_episode_order",
    "make_rngs",
    "require_text_action",
    "to_async",
    "to_sync",
]

#: ``reset`` returns the first observation (``str``, or :class:`~gem_core.multimodal.Content` with images)
#: and an info dict.
ResetReturn = tuple[Observation, dict[str, Any]]
#: ``step`` returns observation, reward, terminated, truncated, info.
StepReturn = tuple[Observation, float, bool, bool, dict[str, Any]]

#: Info keys with a fixed meaning across gem. Envs may set the first group; wrappers and
#: vector envs own the rest, and an env must not write them.
RESERVED_INFO_KEYS: dict[str, str] = {
    # set by envs
    "success": "bool: the episode reached its goal (set on the last step).",
    "format_error": "bool: the action could not be parsed.",
    "parsed_action": "str: the action as the env understood it.",
    "tool_calls": "int: tool calls made during this step (set by the tool wrapper).",
    # set by wrappers and vector envs
    "episode": "dict: statistics of a finished episode (EpisodeStatistics wrapper).",
    "final_obs": "str: last observation of an episode finished by autoreset.",
    "final_info": "dict: last info of an episode finished by autoreset.",
    "messages": "list: structured chat history (chat wrapper).",
}


def require_text_action(env: object, action: object, contract: str) -> None:
    r"""Check a text env's action before the turn counts.

    Args:
        env: The env (named in the message).
        action: What ``step`` received.
        contract: What the action must be, e.g. ``"the reply, with the answer in \boxed{...}"``.

    Raises:
        InvalidAction: ``action`` is not a ``str``; the message names the contract.
    """
    if not isinstance(action, str):
        raise InvalidAction(
            f"{type(env).__name__}.step() takes a str ({contract}), got {type(action).__name__}; "
            "this turn did not count"
        )


def make_rngs(seed: int | None) -> tuple[np.random.Generator, random.Random, int]:
    """Build an env's private numpy and stdlib RNGs from one seed.

    Args:
        seed: A non-negative integer, or ``None`` to draw fresh entropy from the OS.

    Returns:
        ``(np_generator, py_random, seed_used)``; both RNGs derive from the same
        ``SeedSequence`` so one number reproduces both.
    """
    used = _checked_seed(seed)
    return _np_rng(used), _py_rng(used), used


def _checked_seed(seed: int | None) -> int:
    """``seed`` as an int, or fresh OS entropy for ``None``; refuses what is not a seed."""
    # bool is an int subclass, but reset(seed=True) is a mistake, as in the vector envs' check.
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
    return int(np.random.SeedSequence().entropy) if seed is None else int(seed)  # type: ignore[arg-type]


def _np_rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))


def _py_rng(seed: int) -> random.Random:
    state = np.random.SeedSequence(seed).generate_state(4, np.uint32)
    return random.Random(int.from_bytes(state.tobytes(), "little"))


# ---------------------------------------------------------------------------- the episode order

EpisodeState = Literal["not_started", "running", "over"]
_E = TypeVar("_E")


def ends_episode(result: Any) -> bool:
    """Whether a ``step`` result is a 5-tuple whose ``terminated`` or ``truncated`` is true.

    A malformed result (FaultyEnv's) is not an end: it is passed on for the caller's checks to name.
    """
    if not (isinstance(result, tuple) and len(result) == 5):
        return False
    flags: tuple[Any, ...] = result[2:4]
    return any(isinstance(flag, (bool, np.bool_)) and bool(flag) for flag in flags)


def enforce_episode_order(env: _E) -> _E:
    """Make ``env`` refuse ``step`` outside an episode; returns ``env`` itself (no wrapper).

    ``gem_core.make`` does this to every env it builds, and wrappers always do it, so an env's
    author writes no bookkeeping: before the first ``reset``, and after a step that returned
    ``terminated`` or ``truncated``, ``step`` raises :class:`~gem_core.errors.ResetNeeded`
    without reaching the env's code. The check sits in the ``step`` and ``reset`` of every
    :class:`Env` and :class:`AsyncEnv` subclass (added when the class is defined) and is
    switched on per instance, so the object, its type and its attributes stay the env's own; an
    env that raises ``ResetNeeded`` itself keeps working (the check comes first). Only the
    outermost call on an instance checks and moves the state: a ``reset`` that steps its own
    env, or a ``step`` that calls ``super().step()``, is one call.

    Args:
        env: An :class:`Env` or :class:`AsyncEnv`; any other object is returned unchanged.
    """
    if isinstance(env, (Env, AsyncEnv)):
        vars(env)["_gem_enforce_order"] = True
    return env


def _require_running(env: Any) -> None:
    state: EpisodeState = vars(env).get("_gem_episode_state", "not_started")
    if state == "running":
        return
    name = type(env).__name__
    if state == "not_started":
        raise ResetNeeded(f"{name}.step() called before reset(): call reset() first")
    raise ResetNeeded(
        f"{name}.step() called after the episode ended (a step returned terminated or truncated): "
        "call reset() to start a new episode"
    )


def _enter(env: Any, is_step: bool) -> bool:
    """Start a guarded call; whether it is the outermost one on ``env`` (the one that checks and moves the state)."""
    state = vars(env)
    depth: int = state.get("_gem_order_depth", 0)
    if depth == 0:
        if is_step:
            _require_running(env)
        else:
            state["_gem_episode_state"] = "not_started"  # a reset that raises leaves no episode running
    state["_gem_order_depth"] = depth + 1
    return depth == 0


def _leave(env: Any, is_step: bool, outer: bool, result: Any) -> None:
    if outer:
        if not is_step:
            vars(env)["_gem_episode_state"] = "running"
        elif ends_episode(result):
            vars(env)["_gem_episode_state"] = "over"


def _guarded(method: Callable[..., Any], is_step: bool) -> Callable[..., Any]:
    """``method`` (a ``step`` or ``reset``, sync or async) with the episode check around it."""
    guarded: Callable[..., Any]
    if inspect.iscoroutinefunction(method):

        async def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not getattr(self, "_gem_enforce_order", False):
                return await method(self, *args, **kwargs)
            outer = _enter(self, is_step)
            try:
                result = await method(self, *args, **kwargs)
            finally:
                vars(self)["_gem_order_depth"] -= 1
            _leave(self, is_step, outer, result)
            return result

    else:

        def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not getattr(self, "_gem_enforce_order", False):
                return method(self, *args, **kwargs)
            outer = _enter(self, is_step)
            try:
                result = method(self, *args, **kwargs)
            finally:
                vars(self)["_gem_order_depth"] -= 1
            _leave(self, is_step, outer, result)
            return result

    functools.update_wrapper(guarded, method)
    setattr(guarded, "_gem_episode_guard", True)  # noqa: B010  # marks it so that it is never guarded twice
    return guarded


def _guard_class(cls: type) -> None:
    """Put the episode check around the ``step`` and ``reset`` that ``cls`` resolves to (its own or inherited)."""
    for name in ("step", "reset"):
        method = getattr(cls, name, None)
        if not inspect.isfunction(method) or getattr(method, "_gem_episode_guard", False):
            continue
        if getattr(method, "__isabstractmethod__", False):
            continue
        setattr(cls, name, _guarded(method, is_step=name == "step"))


class _Seeded:
    """RNG bookkeeping shared by :class:`Env` and :class:`AsyncEnv`.

    A reset only records the seed; each RNG is built from it when first used in the episode
    (the same streams as :func:`make_rngs`), so an env pays only for the RNGs it draws from:
    building both costs about 10 microseconds, most of a cheap env's reset.
    """

    _np_random: np.random.Generator | None = None
    _py_random: random.Random | None = None
    _seed: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _guard_class(cls)  # the check is off until enforce_episode_order (make) switches it on

    def _seed_rngs(self, seed: int | None) -> None:
        self._seed = _checked_seed(seed)
        self._np_random = self._py_random = None

    def _seed_to_draw_from(self) -> int:
        """The recorded seed; fresh OS entropy (then recorded) when no reset gave one yet."""
        if self._seed is None:
            self._seed_rngs(None)
        assert self._seed is not None
        return self._seed

    @property
    def np_random(self) -> np.random.Generator:
        """The env's numpy Generator; seeded from OS entropy if ``reset`` gave no seed."""
        if self._np_random is None:
            self._np_random = _np_rng(self._seed_to_draw_from())
        return self._np_random

    @property
    def py_random(self) -> random.Random:
        """The env's ``random.Random``, derived from the same seed as :attr:`np_random`."""
        if self._py_random is None:
            self._py_random = _py_rng(self._seed_to_draw_from())
        return self._py_random

    @property
    def seed_used(self) -> int | None:
        """The seed (or drawn entropy) behind the current RNG state; ``None`` before any draw."""
        return self._seed


class Env(_Seeded, abc.ABC):
    """A text environment for LLM agents, in Gymnasium's shape.

    Actions are ``str``; observations are ``str``, or a :class:`~gem_core.multimodal.Content`
    (text and images) for envs that show pictures. An episode is one ``reset`` followed by
    ``step`` calls until ``terminated`` or ``truncated`` is true.

    Contract:
        * ``reset(*, seed=None, options=None) -> (obs, info)`` starts an episode.
          Subclasses call ``super().reset(seed=seed)`` first: a non-``None`` seed
          reseeds :attr:`np_random` and :attr:`py_random`; ``None`` continues the
          current streams. Envs draw all randomness from these two RNGs and never
          from the process-global ``random`` or ``numpy.random`` state, so the same
          seed and the same actions give the same episode.
        * ``step(action) -> (obs, reward, terminated, truncated, info)``:
            - ``terminated``: the episode reached a terminal state of the task
              (solved, failed, format error that ends the game). Returns after it
              carry no future value.
            - ``truncated``: the episode was cut short from outside the task's
              dynamics (turn limit, time limit). Future value is not zero, so
              bootstrapping trainers must not treat it as terminal.
            - ``reward``: the reward of this turn alone (not cumulative).
            - ``step`` must never raise for any ``str`` the model can produce:
              malformed actions produce an observation explaining the expected
              format (and ``info["format_error"] = True``).
        * ``close()`` releases resources and may be called any number of times.
        * ``info`` keys listed in :data:`RESERVED_INFO_KEYS` have fixed meanings.

    Attributes:
        metadata: Class-level facts. Known keys: ``multi_turn`` (bool) and ``play_kwargs``
            (constructor kwargs ``gem play`` applies so a person can type moves directly,
            e.g. ``{"answer_format": "raw"}``).
        spec: The :class:`~gem_core.registry.EnvSpec` the env was made from, set by ``make``.
    """

    metadata: ClassVar[dict[str, Any]] = {}
    spec: EnvSpec | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        """Start a new episode.

        Args:
            seed: Reseeds the env's RNGs when given; ``None`` keeps the current streams.
            options: Env-specific reset options (e.g. a dataset index).

        Returns:
            The first observation and an info dict.
        """
        if seed is not None or self._seed is None:
            self._seed_rngs(seed)
        return "", {}

    @abc.abstractmethod
    def step(self, action: str) -> StepReturn:
        """Apply the agent's response and advance one turn.

        Args:
            action: The model's raw text response.

        Returns:
            ``(observation, reward, terminated, truncated, info)``.
        """

    def close(self) -> None:
        """Release resources; idempotent."""

    def sample_random_action(self) -> str:
        """A random valid-looking action, for smoke tests and ``check_env``.

        Raises:
            NotImplementedError: the env does not provide one.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement sample_random_action()")

    @property
    def unwrapped(self) -> Env:
        """The innermost env (itself for an unwrapped env)."""
        return self

    def __enter__(self) -> Env:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        sid = f" {self.spec.id}" if self.spec is not None else ""
        return f"<{type(self).__name__}{sid}>"


class AsyncEnv(_Seeded, abc.ABC):
    """An env whose ``reset``/``step``/``close`` are coroutines, for envs that wait on I/O.

    The contract is exactly :class:`Env`'s; only the calling convention differs.
    Use :func:`to_sync` to drive one from plain code and :func:`to_async` to drive a
    sync :class:`Env` from asyncio.
    """

    metadata: ClassVar[dict[str, Any]] = {}
    spec: EnvSpec | None = None

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        """Async :meth:`Env.reset`."""
        if seed is not None or self._seed is None:
            self._seed_rngs(seed)
        return "", {}

    @abc.abstractmethod
    async def step(self, action: str) -> StepReturn:
        """Async :meth:`Env.step`."""

    async def close(self) -> None:
        """Async :meth:`Env.close`; idempotent."""

    def sample_random_action(self) -> str:
        """See :meth:`Env.sample_random_action`."""
        raise NotImplementedError(f"{type(self).__name__} does not implement sample_random_action()")

    @property
    def unwrapped(self) -> AsyncEnv:
        """The innermost env."""
        return self

    def __repr__(self) -> str:
        sid = f" {self.spec.id}" if self.spec is not None else ""
        return f"<{type(self).__name__}{sid}>"


class SyncToAsync(AsyncEnv):
    """Drives a sync :class:`Env` from asyncio.

    Args:
        env: The sync env.
        in_thread: Run each call in the default thread pool (for envs that block);
            ``False`` runs it inline on the event loop, which is faster for cheap envs.
    """

    def __init__(self, env: Env, *, in_thread: bool = True) -> None:
        self.env = env
        self.in_thread = in_thread
        self.spec = env.spec

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if self.in_thread:
            return await asyncio.to_thread(fn, *args, **kwargs)
        return fn(*args, **kwargs)

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        result: ResetReturn = await self._call(self.env.reset, seed=seed, options=options)
        return result

    async def step(self, action: str) -> StepReturn:
        result: StepReturn = await self._call(self.env.step, action)
        return result

    async def close(self) -> None:
        await self._call(self.env.close)

    def sample_random_action(self) -> str:
        return self.env.sample_random_action()

    @property
    def np_random(self) -> np.random.Generator:
        return self.env.np_random

    @property
    def unwrapped(self) -> AsyncEnv:
        return self

    @property
    def inner(self) -> Env:
        """The wrapped sync env."""
        return self.env


class AsyncToSync(Env):
    """Drives an :class:`AsyncEnv` from plain (blocking) code.

    Each bridged env owns one event loop running in a daemon thread, so it works
    both from plain code and from inside a running event loop (where
    ``asyncio.run`` would fail). ``close()`` stops the loop and joins the thread.
    """

    def __init__(self, env: AsyncEnv) -> None:
        self.env = env
        self.spec = env.spec
        self._loop = LoopThread("gem-async-bridge")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        return self._loop.run_sync(self.env.reset(seed=seed, options=options))

    def step(self, action: str) -> StepReturn:
        return self._loop.run_sync(self.env.step(action))

    def close(self) -> None:
        # Closes the inner env on its own loop (if that loop ever started), then stops the loop.
        self._loop.close(before=self.env.close)

    def sample_random_action(self) -> str:
        return self.env.sample_random_action()

    @property
    def np_random(self) -> np.random.Generator:
        return self.env.np_random


def to_async(env: Env | AsyncEnv, *, in_thread: bool = True) -> AsyncEnv:
    """Return an :class:`AsyncEnv` view of ``env`` (unchanged if it already is one)."""
    if isinstance(env, AsyncEnv):
        return env
    if isinstance(env, AsyncToSync):
        return env.env
    return SyncToAsync(env, in_thread=in_thread)


def to_sync(env: Env | AsyncEnv) -> Env:
    """Return a blocking :class:`Env` view of ``env`` (unchanged if it already is one)."""
    if isinstance(env, Env):
        return env
    if isinstance(env, SyncToAsync):
        return env.env
    return AsyncToSync(env)
