"""One sub-env and its per-env logic: autoreset, seeds, error recovery (defined once, here).

A vector env sends each sub-env a typed request, :class:`Step` or :class:`Reset`, and gets
back an *outcome*: the ``step``/``reset`` tuple of the batch entry, or a :class:`Failure`.
A :class:`Member` turns one request into the env calls it needs (a step, then a reset
when the episode ends in ``same_step`` mode; a reset instead of the step in ``next_step``
mode; a recovery reset after an error with ``on_error="reset"``). The same class runs in
every backend: in the caller's thread, on an event loop (:class:`AsyncMember`), in a
worker process or in a Ray actor. Backends only move requests and outcomes around.
"""

from __future__ import annotations

import asyncio
import enum
import numbers
import pickle
import traceback
from collections.abc import Coroutine
from typing import Any, Generic, Literal, NamedTuple, TypeVar, Union

import numpy as np

from gem_core.core import AsyncEnv, Env
from gem_core.errors import ConfigError, EnvResultError, EnvStepTimeout
from gem_core.multimodal import Content
from gem_core.seed_streams import SeedStream, episode_seed

__all__ = [
    "AsyncMember",
    "AutoresetMode",
    "Failure",
    "Member",
    "MemberState",
    "OnError",
    "Outcome",
    "RemoteEnvError",
    "Request",
    "Reset",
    "Step",
    "describe_env",
    "portable",
    "reset_result_problem",
    "step_result_problem",
]

OnError = Literal["raise", "reset"]


class AutoresetMode(enum.Enum):
    """What ``step`` does with an env whose episode just ended (Gymnasium's three modes).

    * ``NEXT_STEP``: the step that ends an episode returns its final observation and info
      as usual; the *next* ``step`` of that env ignores its action, resets the env and
      returns ``(first_obs, 0.0, False, False, reset_info)``.
    * ``SAME_STEP``: the env is reset within the step that ended it. That step returns the
      new episode's first observation with the final step's reward and flags, and an info
      that is the reset info plus ``final_obs`` and ``final_info`` of the finished episode.
    * ``DISABLED``: nothing is reset; stepping a finished env raises
      :class:`~gem_core.errors.ResetNeeded` until ``reset(indices=[i])``.
    """

    NEXT_STEP = "next_step"
    SAME_STEP = "same_step"
    DISABLED = "disabled"

    @classmethod
    def parse(cls, value: AutoresetMode | str) -> AutoresetMode:
        """Accept the enum, its value, or Gymnasium's spelling (``"NextStep"``)."""
        if isinstance(value, cls):
            return value
        key = str(value).replace("_", "").replace("-", "").lower()
        for mode in cls:
            if mode.value.replace("_", "") == key:
                return mode
        raise ConfigError(f"unknown autoreset_mode {value!r}; choose one of {[m.value for m in cls]}")


class Step(NamedTuple):
    """Request: step the env with ``action`` (or autoreset it, see :class:`AutoresetMode`)."""

    action: str


class Reset(NamedTuple):
    """Request: start a new episode with the next seed of the env's stream.

    Attributes:
        root: The run's root seed.
        restart: Start the stream over at episode 0 of ``root`` (a seeded full reset).
        options: Passed to ``env.reset``.
    """

    root: int
    restart: bool
    options: dict[str, Any] | None


Request = Union[Step, Reset]


class RemoteEnvError(RuntimeError):
    """An env in a worker raised an exception that could not be sent back as itself."""


def portable(exc: BaseException) -> BaseException:
    """``exc`` if it pickles (with the remote traceback as a note), else a :class:`RemoteEnvError` describing it."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        clone: BaseException = pickle.loads(pickle.dumps(exc))
    except Exception:
        return RemoteEnvError(f"{type(exc).__name__}: {exc}\n(raised remotely)\n{tb}")
    clone.__traceback__ = None
    if hasattr(clone, "add_note"):
        clone.add_note(f"raised in a gem_core vector worker:\n{tb}")
    return clone


class Failure:
    """A sub-env request that failed: the env index, the exception, its traceback, and where it happened.

    Attributes:
        index: The env index.
        error: The exception.
        traceback: Its formatted traceback (``""`` for failures the vector env itself detected).
        env_id: The env's registered id, when it has a spec.
        seed: The seed of the episode the env was in (or being reset to), when known.
        phase: The env call that failed: ``"step"``, ``"reset"``, ``"autoreset"``,
            ``"final reset"`` (``same_step``), ``"recovery reset"`` (``on_error="reset"``).
    """

    __slots__ = ("env_id", "error", "index", "phase", "seed", "traceback")

    def __init__(
        self,
        index: int,
        error: BaseException,
        tb: str | None = None,
        *,
        env_id: str | None = None,
        seed: int | None = None,
        phase: str | None = None,
    ) -> None:
        self.index = index
        self.error = error
        self.traceback = (
            tb if tb is not None else "".join(traceback.format_exception(type(error), error, error.__traceback__))
        )
        self.env_id, self.seed, self.phase = env_id, seed, phase

    def where(self) -> str:
        """``env 2 (game:X-v0, seed 123, phase step)``: what a message names."""
        return describe_env(self.index, self.env_id, self.seed, self.phase)

    def describe(self) -> dict[str, Any]:
        """A plain dict for ``info["env_error"]``: index, env_id, seed, phase, type, message, traceback."""
        return {
            "index": self.index,
            "env_id": self.env_id,
            "seed": self.seed,
            "phase": self.phase,
            "type": type(self.error).__name__,
            "message": str(self.error),
            "traceback": self.traceback,
        }

    def __reduce__(self) -> tuple[Any, ...]:
        # crosses process boundaries: the exception travels as a picklable copy
        error = portable(self.error)
        return (_rebuild_failure, (self.index, error, self.traceback, self.env_id, self.seed, self.phase))


def _rebuild_failure(
    index: int, error: BaseException, tb: str, env_id: str | None, seed: int | None, phase: str | None
) -> Failure:
    return Failure(index, error, tb, env_id=env_id, seed=seed, phase=phase)


def describe_env(index: int, env_id: str | None, seed: int | None, phase: str | None) -> str:
    """``env 2 (game:X-v0, seed 123, phase step)``, leaving out what is not known."""
    parts = [env_id or "id unknown", f"seed {seed}" if seed is not None else "seed unknown"]
    if phase:
        parts.append(f"phase {phase}")
    return f"env {index} ({', '.join(parts)})"


# ---------------------------------------------------------------------- the result contract
# Exact types first (one set lookup each): the check runs on every step of every env.
_NUMBER_TYPES = frozenset({float, int, np.float64, np.float32, np.int64})
_FLAG_TYPES = frozenset({bool, np.bool_})


def _is_step_result(value: Any) -> bool:
    if type(value) is not tuple or len(value) != 5:
        return False
    obs, reward, terminated, truncated, info = value
    return (
        type(obs) is str
        and type(info) is dict
        and type(reward) in _NUMBER_TYPES
        and type(terminated) in _FLAG_TYPES
        and type(truncated) in _FLAG_TYPES
    )


def step_result_problem(value: Any) -> str | None:
    """What is wrong with ``value`` as a ``step`` result, or ``None`` if it keeps the contract."""
    if not isinstance(value, tuple) or len(value) != 5:
        shown = f"a {len(value)}-tuple" if isinstance(value, tuple) else f"{type(value).__name__} {value!r:.80}"
        return f"step() must return a 5-tuple (obs, reward, terminated, truncated, info), got {shown}"
    obs, reward, terminated, truncated, info = value
    if not isinstance(obs, (str, Content)):
        return f"step() observation must be str or Content, got {type(obs).__name__}"
    if isinstance(reward, (bool, np.bool_)) or not isinstance(reward, numbers.Real):
        return f"step() reward must be a float, got {type(reward).__name__}"
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, (bool, np.bool_)):
            return f"step() {name} must be bool, got {type(flag).__name__}"
    if not isinstance(info, dict):
        return f"step() info must be dict, got {type(info).__name__}"
    return None


def reset_result_problem(value: Any) -> str | None:
    """What is wrong with ``value`` as a ``reset`` result, or ``None`` if it keeps the contract."""
    if type(value) is tuple and len(value) == 2 and type(value[0]) is str and type(value[1]) is dict:
        return None
    if not isinstance(value, tuple) or len(value) != 2:
        shown = f"a {len(value)}-tuple" if isinstance(value, tuple) else f"{type(value).__name__} {value!r:.80}"
        return f"reset() must return (obs, info), got {shown}"
    if not isinstance(value[0], (str, Content)):
        return f"reset() observation must be str or Content, got {type(value[0]).__name__}"
    if not isinstance(value[1], dict):
        return f"reset() info must be dict, got {type(value[1]).__name__}"
    return None


#: What a request yields: a reset tuple ``(obs, info)``, a step tuple, or a :class:`Failure`.
Outcome = Union[tuple[Any, ...], Failure]


class MemberState(NamedTuple):
    """What a member's replacement needs after its host (worker, actor) died."""

    root: int | None
    episodes: int
    lost: Failure | None


class _Stage(enum.Enum):
    RESET = "reset"  # explicit reset: the outcome is the reset tuple
    STEP = "step"  # the env's step
    AUTORESET = "autoreset"  # NEXT_STEP: reset instead of the step
    FINAL_RESET = "final reset"  # SAME_STEP: reset after the final step
    RECOVER = "recovery reset"  # on_error="reset": reset after a failure


_STEP, _FINAL_RESET = _Stage.STEP, _Stage.FINAL_RESET
_SAME_STEP = AutoresetMode.SAME_STEP


class _EnvReset(NamedTuple):
    seed: int
    options: dict[str, Any] | None


_EnvCall = Union[str, _EnvReset]  # a str is an action to step with
_E = TypeVar("_E", Env, AsyncEnv)


class _Logic(Generic[_E]):
    """The per-env state machine; :class:`Member` and :class:`AsyncMember` add the env calls."""

    def __init__(
        self,
        index: int,
        env: _E,
        autoreset_mode: AutoresetMode,
        on_error: OnError,
        state: MemberState | None = None,
    ) -> None:
        self.index = index
        self.env: _E = env
        self.mode = autoreset_mode
        self.on_error = on_error
        self.seeds = SeedStream(index, state.root if state else None, state.episodes if state else 0)
        #: The seed of the episode the env is in (or being reset to); for error messages.
        self.seed: int | None = None
        if self.seeds.root is not None and self.seeds.episodes > 0:
            self.seed = episode_seed(self.seeds.root, index, self.seeds.episodes - 1)
        try:
            self.env_id: str | None = getattr(getattr(env, "spec", None), "id", None)
        except Exception:  # a broken spec property must not break the vector env
            self.env_id = None
        self.pending_reset = False  # NEXT_STEP: the last step ended the episode
        # set when the env was rebuilt after its host died: its episode is gone
        self.lost: Failure | None = state.lost if state else None
        self._stage = _Stage.STEP
        self._held: Any = None  # the final step (FINAL_RESET) or the failure (RECOVER)
        self.outcome: Outcome = ()

    @property
    def state(self) -> MemberState:
        return MemberState(self.seeds.root, self.seeds.episodes, self.lost)

    def _begin(self, request: Request) -> _EnvCall | None:
        if type(request) is Step:
            if self.lost is not None:
                failure, self.lost = self.lost, None
                return self._fail(failure)
            if self.pending_reset:
                self.pending_reset = False
                self._stage = _Stage.AUTORESET
                return self._next_episode(None)
            self._stage = _Stage.STEP
            return request.action
        assert type(request) is Reset
        if request.restart or self.seeds.root != request.root:
            self.seeds.restart(request.root)
        self.pending_reset = False
        self.lost = None
        self._stage = _Stage.RESET
        return self._next_episode(request.options)

    def _next_episode(self, options: dict[str, Any] | None) -> _EnvReset:
        self.seed = seed = self.seeds.take()
        return _EnvReset(seed, options)

    @property
    def phase(self) -> str:
        """The env call under way or last made (``step``, ``reset``, ``autoreset``, ``final reset``, ...)."""
        return self._stage.value

    def where(self) -> str:
        """``env 2 (game:X-v0, seed 123, phase step)``."""
        return describe_env(self.index, self.env_id, self.seed, self._stage.value)

    def timeout_error(self, seconds: float, detail: str = "") -> EnvStepTimeout:
        """An :class:`EnvStepTimeout` naming this env."""
        return EnvStepTimeout(f"{self.where()}: no result within step_timeout={seconds:g}s{detail}")

    def failure(self, error: BaseException, tb: str | None = None) -> Failure:
        """A :class:`Failure` of this env in its current phase."""
        return Failure(self.index, error, tb, env_id=self.env_id, seed=self.seed, phase=self._stage.value)

    def result_error(self, problem: str) -> EnvResultError:
        """An :class:`EnvResultError` naming this env, its seed and phase, and ``problem``."""
        where = describe_env(self.index, self.env_id, self.seed, self._stage.value)
        return EnvResultError(f"{where}: {problem}. Fix the env (gem_core.testing.check_env finds such bugs)")

    def _checked(self, call: _EnvCall, value: Any) -> Any:
        """``value`` if it is a valid result of ``call``; else raises :class:`EnvResultError` (inside the guard)."""
        if type(call) is str:
            if not _is_step_result(value):
                problem = step_result_problem(value)
                if problem is not None:
                    raise self.result_error(problem)
        else:
            problem = reset_result_problem(value)
            if problem is not None:
                raise self.result_error(problem)
        return value

    def recover(self, failure: Failure) -> Outcome:
        """Apply ``on_error`` to a failure found after this member's last request (its result did not travel).

        Synchronous: only :class:`Member` calls it (hosts are sync).
        """
        raise NotImplementedError

    def _advance(self, value: Any) -> _EnvCall | None:
        stage = self._stage
        if stage is _Stage.STEP:
            self.outcome = value
            if value[2] or value[3]:
                if self.mode is AutoresetMode.SAME_STEP:
                    self._held = value
                    self._stage = _Stage.FINAL_RESET
                    return self._next_episode(None)
                self.pending_reset = self.mode is AutoresetMode.NEXT_STEP
            return None
        obs, info = value
        if stage is _Stage.RESET:
            self.outcome = value
        elif stage is _Stage.AUTORESET:
            self.outcome = (obs, 0.0, False, False, info)
        elif stage is _Stage.FINAL_RESET:
            last = self._held
            self.outcome = (obs, last[1], last[2], last[3], {**info, "final_obs": last[0], "final_info": last[4]})
        else:
            self.outcome = (obs, 0.0, False, True, {**info, "env_error": self._held.describe()})
        self._held = None
        return None

    def _raised(self, exc: Exception) -> _EnvCall | None:
        return self._fail(self.failure(exc))

    def _fail(self, failure: Failure) -> _EnvCall | None:
        # Recovery resets only failed *steps*; a failed explicit reset or recovery is reported.
        if self.on_error == "reset" and self._stage not in (_Stage.RESET, _Stage.RECOVER):
            self.pending_reset = False
            self._held = failure
            self._stage = _Stage.RECOVER
            return self._next_episode(None)
        self.pending_reset = False
        self._held = None
        self.outcome = failure
        return None


class Member(_Logic[Env]):
    """A sync env with its per-env logic; :meth:`handle` serves one request."""

    def handle(self, request: Request) -> Outcome:
        return self._run(self._begin(request))

    def step(self, action: str) -> Outcome:
        """:meth:`handle` of ``Step(action)``, without building the request (the hot path of cheap envs).

        The common case (a valid result, the episode goes on) is one env call and a few exact-type
        checks; everything else takes the general path of :meth:`_run`.
        """
        if self.lost is not None or self.pending_reset:
            return self._run(self._begin(Step(action)))
        self._stage = _STEP  # also for recover(): the last call was a step
        try:
            value = self.env.step(action)
        except Exception as exc:
            return self._run(self._raised(exc))
        if not (
            type(value) is tuple
            and len(value) == 5
            and type(value[0]) is str
            and type(value[4]) is dict
            and type(value[1]) in _NUMBER_TYPES
            and type(value[2]) in _FLAG_TYPES
            and type(value[3]) in _FLAG_TYPES
        ):
            try:  # the slow check raises inside a guard: a bad result is this env's failure
                self._checked(action, value)
            except Exception as exc:
                return self._run(self._raised(exc))
        if value[2] or value[3]:
            if self.mode is _SAME_STEP:
                return self._final_reset(value)
            return self._run(self._advance(value))
        return value

    def _final_reset(self, last: tuple[Any, ...]) -> Outcome:
        """SAME_STEP: reset after the final step ``last``; :meth:`_advance` then :meth:`_run`, without the loop."""
        self._held = last
        self._stage = _FINAL_RESET
        self.seed = seed = self.seeds.take()
        try:
            value = self.env.reset(seed=seed, options=None)
            if not (type(value) is tuple and len(value) == 2 and type(value[0]) is str and type(value[1]) is dict):
                self._checked(_EnvReset(seed, None), value)
        except Exception as exc:
            return self._run(self._raised(exc))
        self._held = None
        self.outcome = (
            value[0],
            last[1],
            last[2],
            last[3],
            {**value[1], "final_obs": last[0], "final_info": last[4]},
        )
        return self.outcome

    def recover(self, failure: Failure) -> Outcome:
        return self._run(self._fail(failure))

    def _run(self, call: _EnvCall | None) -> Outcome:
        env = self.env
        while call is not None:
            try:
                if type(call) is str:
                    value = self._checked(call, env.step(call))
                else:
                    value = self._checked(call, env.reset(seed=call.seed, options=call.options))  # type: ignore[union-attr]
            except Exception as exc:
                call = self._raised(exc)
                continue
            call = self._advance(value)
        return self.outcome


class AsyncMember(_Logic[AsyncEnv]):
    """An async env with its per-env logic; :meth:`handle` serves one request on an event loop.

    With a ``timeout``, each env call that runs past it is cancelled and fails with
    :class:`~gem_core.errors.EnvStepTimeout` (``on_error`` applies).
    """

    timeout: float | None = None

    async def handle(self, request: Request) -> Outcome:
        env = self.env
        call = self._begin(request)
        while call is not None:
            try:
                if type(call) is str:
                    value: Any = self._checked(call, await self._within(env.step(call)))
                else:
                    value = self._checked(call, await self._within(env.reset(seed=call.seed, options=call.options)))  # type: ignore[union-attr]
            except Exception as exc:
                call = self._raised(exc)
                continue
            call = self._advance(value)
        return self.outcome

    async def _within(self, call: Coroutine[Any, Any, Any]) -> Any:
        if self.timeout is None:
            return await call
        try:
            return await asyncio.wait_for(call, self.timeout)
        except (asyncio.TimeoutError, TimeoutError):
            raise self.timeout_error(self.timeout, " (the call was cancelled)") from None
