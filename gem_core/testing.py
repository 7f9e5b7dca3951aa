"""Test kit for env authors: :func:`check_env`, a reference env and an injectable test env.

Every env package calls :func:`check_env` in its own tests::

    from gem_core import make
    from gem_core.testing import check_env

    def test_contract():
        check_env(make("mygames:Maze-v0"))
"""

from __future__ import annotations

import builtins
import ctypes
import inspect
import math
import os
import pickle
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, ClassVar, cast

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gem_core.core import AsyncEnv, Env, ResetReturn, StepReturn, to_sync
from gem_core.errors import EnvCheckError, ImageError, ResetNeeded
from gem_core.multiagent.core import MultiAgentEnv
from gem_core.multimodal import Content, Observation, observation_text
from gem_core.tools.base import Tool, ToolResult
from gem_core.wrappers.base import Wrapper, ends_episode

__all__ = [
    "FAULTS",
    "FUZZ_ACTIONS",
    "REPLY_ENDINGS",
    "EchoTool",
    "FaultyEnv",
    "GenericTestEnv",
    "NumberGuessConfig",
    "NumberGuessEnv",
    "Unloadable",
    "check_env",
    "engine_reading",
    "faulty_number_guess",
    "sampled_reply",
]


class NumberGuessConfig(BaseModel):
    """Configuration of :class:`NumberGuessEnv`; ``make`` validates kwargs through it."""

    model_config = ConfigDict(extra="forbid")

    low: int = 1
    high: int = 16
    max_turns: int = Field(default=5, ge=1)

    @model_validator(mode="after")
    def _check_range(self) -> NumberGuessConfig:
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        return self


class NumberGuessEnv(Env):
    """Reference env: find a secret integer in ``[low, high]`` from higher/lower hints.

    Reward 1.0 on the right guess (terminated), 0.0 otherwise; an action with no
    integer costs -0.1 and explains the expected format. The episode is truncated
    after ``max_turns`` guesses.
    """

    metadata = {"multi_turn": True}
    config_model = NumberGuessConfig
    _INT = re.compile(r"-?\d+")

    def __init__(self, low: int = 1, high: int = 16, max_turns: int = 5) -> None:
        NumberGuessConfig(low=low, high=high, max_turns=max_turns)  # same checks when built directly
        self.low, self.high, self.max_turns = low, high, max_turns
        self.target: int | None = None
        self.turn = 0
        self.done = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        self.target = int(self.np_random.integers(self.low, self.high + 1))
        self.turn = 0
        self.done = False
        return (
            f"I picked a whole number between {self.low} and {self.high}. You have {self.max_turns} guesses. "
            "Answer with a number, e.g. 7.",
            {},
        )

    def step(self, action: str) -> StepReturn:
        if self.target is None or self.done:
            when = "before reset()" if self.target is None else "after the episode ended"
            raise ResetNeeded(f"NumberGuessEnv.step() called {when}: call reset() first")
        self.turn += 1
        truncated = self.turn >= self.max_turns
        self.done = truncated  # a right guess sets it below
        found = self._INT.findall(action[-200:])
        if not found:
            obs = (
                "I could not find a number in your answer. "
                f"Reply with one whole number between {self.low} and {self.high}."
            )
            return obs, -0.1, False, truncated, {"format_error": True}
        guess = int(found[-1])
        if guess == self.target:
            self.done = True
            return f"Correct, it was {guess}!", 1.0, True, False, {"success": True, "parsed_action": str(guess)}
        hint = "higher" if guess < self.target else "lower"
        obs = f"{guess} is wrong; the number is {hint}."
        if truncated:
            obs += f" Out of guesses: it was {self.target}."
        return obs, 0.0, False, truncated, {"success": False, "parsed_action": str(guess)}

    def sample_random_action(self) -> str:
        return str(self.py_random.randint(self.low, self.high))


class EchoTool(Tool):
    """Reference tool ``echo``: returns its text. Deterministic and instant, for tests and conformance."""

    name: ClassVar[str] = "echo"
    description: ClassVar[str] = "Repeats its text."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    tag_argument: ClassVar[str | None] = "text"

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(output=f"echo: {arguments.get('text', '')}")


class GenericTestEnv(Env):
    """An env whose behaviour is injected, to test wrappers and tools without writing a class.

    Args:
        reset_func: ``(env, seed, options) -> (obs, info)``; default returns ``("start", {})``.
        step_func: ``(env, action) -> step tuple``; default echoes the action and ends after
            ``episode_length`` steps with reward 1.0 on the last one.
        episode_length: Steps per episode for the default ``step_func``.

    Like every env, it raises :class:`~gem_core.errors.ResetNeeded` on ``step`` before
    ``reset`` and after a step that returned ``terminated`` or ``truncated``.
    """

    def __init__(
        self,
        reset_func: Callable[[GenericTestEnv, int | None, dict[str, Any] | None], ResetReturn] | None = None,
        step_func: Callable[[GenericTestEnv, str], StepReturn] | None = None,
        episode_length: int = 3,
    ) -> None:
        self.reset_func = reset_func
        self.step_func = step_func
        self.episode_length = episode_length
        self.t = 0
        self.closed = 0
        self.running = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        self.t = 0
        self.running = True
        if self.reset_func is not None:
            return self.reset_func(self, seed, options)
        return f"start {int(self.np_random.integers(1_000_000))}", {}

    def step(self, action: str) -> StepReturn:
        if not self.running:
            raise ResetNeeded("GenericTestEnv.step() called before reset() or after the episode ended")
        self.t += 1
        if self.step_func is not None:
            result = self.step_func(self, action)
        else:
            done = self.t >= self.episode_length
            result = f"echo[{self.t}]: {action[:50]}", 1.0 if done else 0.0, done, False, {}
        if ends_episode(result):
            self.running = False
        return result

    def close(self) -> None:
        self.closed += 1

    def sample_random_action(self) -> str:
        return f"action {int(self.np_random.integers(100))}"


#: What :class:`FaultyEnv` can do at its chosen turn (see there).
FAULTS: tuple[str, ...] = (
    "raise",
    "none",
    "wrong_arity",
    "wrong_type",
    "unpicklable",
    "unloadable",
    "exit",
    "segfault",
    "hang",
    "setsid_child",
)


class Unloadable:
    """Pickles, but unpickling it raises: a result that leaves a worker and cannot be read by the parent."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_refuse_to_unpickle, ("gem_core.testing.Unloadable refuses to be unpickled",))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unloadable)

    def __hash__(self) -> int:
        return 0


def _refuse_to_unpickle(message: str) -> Unloadable:
    raise RuntimeError(message)


class FaultyEnv(Wrapper):
    """Plays ``env`` normally, then misbehaves at a chosen turn: a flaky grader, a buggy env, a tool server that died.

    For tests of error isolation (``EpisodeLimits(on_env_error="end")``, the adapters, the vector backends).

    Args:
        env: The env to wrap.
        fail_at: ``0`` misbehaves in ``reset``; ``k >= 1`` in the ``k``-th ``step`` of an episode.
        seeds: Misbehave only in episodes reset with one of these seeds (``None``: every episode).
        error: For ``fault="raise"``: the exception type to raise, or the name of a builtin one
            (``"TimeoutError"``); its message names the turn and the seed.
        fault: What to do (one of :data:`FAULTS`): ``"raise"`` the error; return ``"none"``, a
            result of the ``"wrong_arity"``, or one whose observation has the ``"wrong_type"``;
            put an ``"unpicklable"`` object (a lock) or an ``"unloadable"`` one (:class:`Unloadable`)
            in ``info["payload"]``; ``"exit"`` the process (``os._exit(17)``); ``"segfault"``;
            ``"hang"`` for ``hang_s`` seconds; start a ``"setsid_child"`` (a process in its own
            session that sleeps for ``hang_s``; its pid in ``info["child_pid"]``) and go on normally.
        hang_s: How long ``"hang"`` blocks and a ``"setsid_child"`` lives.
    """

    def __init__(
        self,
        env: Env,
        *,
        fail_at: int = 1,
        seeds: Collection[int] | None = None,
        error: type[BaseException] | str = RuntimeError,
        fault: str = "raise",
        hang_s: float = 600.0,
    ) -> None:
        super().__init__(env)
        if isinstance(error, str):
            error = getattr(builtins, error, None)  # type: ignore[assignment]
        if not (isinstance(error, type) and issubclass(error, BaseException)):
            raise TypeError(f"error must be an exception type or a builtin exception's name, got {error!r}")
        if fail_at < 0:
            raise ValueError(f"fail_at must be >= 0 (0 fails reset), got {fail_at}")
        if fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}, got {fault!r}")
        self.fail_at = fail_at
        self.seeds = None if seeds is None else frozenset(seeds)
        self.error: type[BaseException] = error
        self.fault = fault
        self.hang_s = hang_s
        self._seed: int | None = None
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        self._seed, self._steps = seed, 0
        if not self._due(0):
            return self.env.reset(seed=seed, options=options)
        return self._misbehave(0, lambda: self.env.reset(seed=seed, options=options))  # type: ignore[no-any-return]

    def step(self, action: str) -> StepReturn:
        self._steps += 1
        if not self._due(self._steps):
            return self.env.step(action)
        return self._misbehave(self._steps, lambda: self.env.step(action))  # type: ignore[no-any-return]

    def _due(self, turn: int) -> bool:
        return turn == self.fail_at and (self.seeds is None or self._seed in self.seeds)

    def _misbehave(self, turn: int, call: Callable[[], tuple[Any, ...]]) -> Any:
        where = "reset" if turn == 0 else f"step {turn}"
        fault = self.fault
        if fault == "raise":
            raise self.error(f"FaultyEnv: injected failure in {where} (seed={self._seed})")
        if fault == "exit":
            os._exit(17)
        if fault == "segfault":
            ctypes.string_at(0)  # reads address 0: SIGSEGV
        if fault == "hang":
            time.sleep(self.hang_s)
        if fault == "none":
            return None
        result = call()
        if fault == "wrong_arity":
            return result[:-1]
        if fault == "wrong_type":
            return (len(result[0]), *result[1:])
        info = dict(result[-1])
        if fault == "unpicklable":
            info["payload"] = threading.Lock()
        elif fault == "unloadable":
            info["payload"] = Unloadable()
        elif fault == "setsid_child":
            code = f"import time; time.sleep({self.hang_s})"
            info["child_pid"] = subprocess.Popen([sys.executable, "-c", code], start_new_session=True).pid
        return (*result[:-1], info)


def faulty_number_guess(
    *,
    fail_at: int = 1,
    seeds: Collection[int] | None = None,
    error: type[BaseException] | str = "RuntimeError",
    fault: str = "raise",
    **number_guess: Any,
) -> FaultyEnv:
    """:class:`NumberGuessEnv` in a :class:`FaultyEnv`: an entry point for tests to register, e.g.

    ``gem_core.register("test:Faulty-v0", faulty_number_guess, kwargs={"fail_at": 2})``.
    """
    return FaultyEnv(NumberGuessEnv(**number_guess), fail_at=fail_at, seeds=seeds, error=error, fault=fault)


#: Malformed actions ``step`` must survive: empty, huge, unicode, binary junk, markup fragments.
FUZZ_ACTIONS: tuple[str, ...] = (
    "",
    " \n\t ",
    "x" * 100_000,
    "\\boxed{" * 1000,
    "🤖 ∑ ñ 中文 العربية \u200b\u202e",
    "\x00\x01\x02\xff\ufffd\ud800",
    "\\boxed{}",
    "\\boxed{\\boxed{1}}",
    "\\boxed{ }",
    "\\boxed{-1}",
    "\\boxed{1e309}",
    "\\boxed{NaN}",
    "None",
    "<python>import os</python>",
    '<tool_call>{"name": 1}</tool_call>',
    "]]}}))",
)


def _fail(message: str) -> EnvCheckError:
    return EnvCheckError(message)


def _check_reset_signature(env: Env) -> None:
    params = inspect.signature(env.reset).parameters
    for name in ("seed", "options"):
        p = params.get(name)
        if p is None or p.kind is not inspect.Parameter.KEYWORD_ONLY:
            raise _fail(
                f"reset() must take keyword-only '{name}': define `def reset(self, *, seed=None, options=None)`"
            )


def _check_observation(obs: Any, call: str) -> None:
    """An observation is a ``str`` or a :class:`~gem_core.multimodal.Content` whose images can be read."""
    if isinstance(obs, str):
        return
    if not isinstance(obs, Content):
        raise _fail(
            f"{call} observation must be str or gem_core.multimodal.Content (text and images), got {type(obs).__name__}"
        )
    if not obs.parts:
        raise _fail(f"{call} returned an empty Content; give at least one text or image part")
    for image in obs.images:
        try:
            _ = image.size  # reads the bytes (a path image's file) and checks the header
        except ImageError as exc:
            raise _fail(f"{call} observation holds an unusable image: {exc}") from None
    try:
        pickle.loads(pickle.dumps(obs))  # process and Ray vector envs send observations between processes
    except Exception as exc:
        raise _fail(f"{call} observation does not survive pickling: {type(exc).__name__}: {exc}") from None


def _check_reset_return(result: Any) -> tuple[Observation, dict[str, Any]]:
    if not (isinstance(result, tuple) and len(result) == 2):
        raise _fail(f"reset() must return (obs, info), got {type(result).__name__}: {result!r:.200}")
    obs, info = result
    _check_observation(obs, "reset()")
    if not isinstance(info, dict):
        raise _fail(f"reset() info must be dict, got {type(info).__name__}")
    return obs, info


def _check_step_return(result: Any, action: str) -> StepReturn:
    shown = repr(action[:60])
    if not (isinstance(result, tuple) and len(result) == 5):
        raise _fail(
            f"step({shown}) must return a 5-tuple (obs, reward, terminated, truncated, info), got {result!r:.200}"
        )
    obs, reward, terminated, truncated, info = result
    _check_observation(obs, f"step({shown})")
    if isinstance(reward, bool) or not isinstance(reward, (int, float, np.integer, np.floating)):
        raise _fail(f"step({shown}) reward must be a float, got {type(reward).__name__}")
    if not math.isfinite(float(reward)):
        raise _fail(f"step({shown}) reward must be finite, got {reward}")
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, (bool, np.bool_)):
            raise _fail(f"step({shown}) {name} must be bool, got {type(flag).__name__}")
    if not isinstance(info, dict):
        raise _fail(f"step({shown}) info must be dict, got {type(info).__name__}")
    for key in ("success", "format_error"):
        if key in info and not isinstance(info[key], (bool, np.bool_)):
            raise _fail(f"step({shown}) info[{key!r}] is reserved for a bool, got {type(info[key]).__name__}")
    return obs, float(reward), bool(terminated), bool(truncated), info


def _rollout(env: Env, seed: int, actions: Sequence[str]) -> list[tuple[Any, ...]]:
    obs, info = _check_reset_return(env.reset(seed=seed))
    trace: list[tuple[Any, ...]] = [(obs, sorted(info))]
    for action in actions:
        obs, reward, terminated, truncated, info = _check_step_return(env.step(action), action)
        trace.append((obs, reward, terminated, truncated, sorted(info)))
        if terminated or truncated:
            break
    return trace


_AFTER_DONE = "after the episode ended (a step returned terminated or truncated)"


def _check_refuses_step(env: Env, action: str, when: str) -> None:
    """``env.step`` must raise ``ResetNeeded`` ``when`` (before reset, after the episode ended)."""
    try:
        result = env.step(action)
    except ResetNeeded:
        return
    except Exception as exc:
        raise _fail(
            f"step() {when} raised {type(exc).__name__}: {exc}; it must raise gem_core.errors.ResetNeeded "
            "(check in step() that an episode is running, before anything else)"
        ) from exc
    raise _fail(
        f"step() {when} returned {result!r:.200} instead of raising gem_core.errors.ResetNeeded: "
        "remember whether an episode is running (reset() starts one, a terminated or truncated step ends it) "
        "and raise ResetNeeded in step() when none is"
    )


def _actions_for(env: Env, n: int) -> list[str]:
    try:
        return [env.sample_random_action() for _ in range(n)]
    except NotImplementedError:
        return ["1", "a", "\\boxed{1}", "hello"] * (n // 4 + 1)


def check_env(
    env: Env | AsyncEnv | MultiAgentEnv,
    *,
    seed: int = 0,
    num_steps: int = 20,
    fuzz: bool = True,
    env_factory: Callable[[], Env | AsyncEnv | MultiAgentEnv] | None = None,
) -> None:
    """Check that ``env`` keeps the :class:`~gem_core.Env` contract.

    Checks, in order: ``reset`` signature and return types; ``step`` return types
    (str obs, finite float reward, bool flags, dict info, reserved info keys);
    that ``step`` after a terminated or truncated step (and, on a fresh instance from
    ``env_factory``, before ``reset``) raises :class:`~gem_core.errors.ResetNeeded`;
    determinism (same seed and actions give the same episode, on this instance and
    on a fresh one from ``env_factory``); that the process-global ``random`` and
    ``numpy.random`` states are untouched; that ``step`` survives every action in
    :data:`FUZZ_ACTIONS` and the previous observation echoed back; and that ``close``
    can be called twice. One instance is open at a time: the fresh one is built after
    ``env`` is closed (a remote env's server may hold a single session).

    Args:
        env: The env to check (async envs are driven through :func:`~gem_core.to_sync`).
        seed: Seed used for the determinism check.
        num_steps: Maximum steps per checked episode.
        fuzz: Run the malformed-action fuzz.
        env_factory: Builds a second instance for the cross-instance determinism check.

    Raises:
        EnvCheckError: the first violation found, with what to fix.
    """
    if isinstance(env, MultiAgentEnv):  # a multi-agent env has its own contract
        from gem_core.multiagent.checks import check_multiagent_env

        check_multiagent_env(env, seed=seed, max_steps=max(num_steps, 60), fuzz=fuzz, env_factory=env_factory)  # type: ignore[arg-type]
        return
    sync_env = to_sync(env)
    _check_reset_signature(sync_env.unwrapped if isinstance(sync_env.unwrapped, Env) else sync_env)
    py_state, np_state = random.getstate(), np.random.get_state()

    _check_reset_return(sync_env.reset(seed=seed))
    actions = _actions_for(sync_env, num_steps)
    first = _rollout(sync_env, seed, actions)
    if len(first[-1]) == 5 and (first[-1][2] or first[-1][3]):
        _check_refuses_step(sync_env, actions[len(first) - 2], _AFTER_DONE)
    second = _rollout(sync_env, seed, actions)
    _check_global_rngs(py_state, np_state)  # first: it is the usual cause of non-determinism
    if first != second:
        raise _fail(_diff_message("the same instance reset twice", first, second))

    if fuzz:
        obs, _ = _check_reset_return(sync_env.reset(seed=seed + 1))
        # the previous observation echoed back as the action (its text: actions are str)
        for action in (*FUZZ_ACTIONS, observation_text(obs)):
            try:
                result = sync_env.step(action)
            except Exception as exc:
                raise _fail(
                    f"step({action[:60]!r}) raised {type(exc).__name__}: {exc}. step() must never raise for a "
                    "malformed action: return an observation that explains the expected format instead"
                ) from exc
            *_, terminated, truncated, _info = _check_step_return(result, action)
            if terminated or truncated:
                _check_refuses_step(sync_env, action, _AFTER_DONE)
                obs, _ = _check_reset_return(sync_env.reset())

    _check_global_rngs(py_state, np_state)

    try:
        sync_env.close()
        sync_env.close()
    except Exception as exc:
        raise _fail(f"close() must be idempotent; the second call raised {type(exc).__name__}: {exc}") from exc

    # The second instance only after the first is closed: a remote env's server may hold one session at a
    # time (OpenEnv's default), and the check needs no two at once.
    if env_factory is not None:
        other = to_sync(cast(Any, env_factory()))
        try:
            _check_refuses_step(other, actions[0], "before reset() on a new instance")
            third = _rollout(other, seed, actions)
        finally:
            other.close()
        _check_global_rngs(py_state, np_state)
        if first != third:
            raise _fail(_diff_message("two instances", first, third))


def _check_global_rngs(py_state: Any, np_state: Any) -> None:
    if random.getstate() != py_state:
        raise _fail("the env changed the global `random` state: draw from self.py_random / self.np_random instead")
    if not _same_np_state(np.random.get_state(), np_state):
        raise _fail("the env changed the global `numpy.random` state: draw from self.np_random instead")


def _same_np_state(a: Any, b: Any) -> bool:
    return bool(a[0] == b[0] and np.array_equal(a[1], b[1]) and tuple(a[2:]) == tuple(b[2:]))


def _diff_message(what: str, a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            where = "reset" if i == 0 else f"step {i}"
            return (
                f"not deterministic across {what} with the same seed and actions: "
                f"at {where}, {x!r:.300} != {y!r:.300}. "
                "Draw all randomness from self.np_random / self.py_random, seeded by super().reset(seed=seed)"
            )
    return f"not deterministic across {what}: episodes have different lengths ({len(a)} vs {len(b)})"


# ---------------------------------------------------------------------- finish reasons: how the engine reads a reply

#: How a server can end a reply of at most ``max_tokens`` tokens: its stop token before the
#: limit, its stop token as the last token allowed, cut at the limit, or aborted.
REPLY_ENDINGS = ("stop", "stop-at-limit", "cut", "abort")


def sampled_reply(ending: str, max_tokens: int, stop_id: int, filler_id: int) -> list[int]:
    """The ids a server samples for a reply that ends as ``ending`` (one of :data:`REPLY_ENDINGS`)."""
    if max_tokens < 2:
        raise ValueError(f"max_tokens must be >= 2 to tell the endings apart, got {max_tokens}")
    return {
        "stop": [filler_id] * (max_tokens // 2 - 1) + [stop_id],
        "stop-at-limit": [filler_id] * (max_tokens - 1) + [stop_id],
        "cut": [filler_id] * max_tokens,
        "abort": [filler_id] * (max_tokens // 2),
    }[ending]


def engine_reading(generation: Any, tokenizer: Any, max_tokens: int) -> str:
    """How the episode engine (token mode, ``on_cut="invalid"``) takes one reply: ``"stop"``, ``"cut"`` or ``"abort"``.

    For property tests of an adapter's finish-reason mapping: whatever the server said, a
    reply cut at its limit must read as ``"cut"``, never ``"stop"``.
    """
    from gem_core.episode import INVALID_ACTION, EpisodeEngine, EpisodeLimits

    engine = EpisodeEngine(tokenizer, EpisodeLimits(max_turn_tokens=max_tokens))
    session = engine.session(env_id="test:finish", seed=0)
    session.begin("Say something.")
    session.request()
    action = session.accept(generation)
    if action is None:
        return str(session.end_reason)
    return "cut" if action == INVALID_ACTION else "stop"
