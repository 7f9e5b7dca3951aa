"""Any registered gem env as an OpenEnv 0.10 env server, speaking OpenEnv's wire protocol with gem's own code.

No OpenEnv code runs here (gem-openenv installs beside packages whose pins exclude OpenEnv's): the
app is Starlette's, the protocol is OpenEnv 0.10's as its own clients speak it (docs/interop.md):

* ``/ws``: one session per WebSocket (or, with ``?session_id=``, the session an HTTP ``/mcp``
  ``openenv/session/create`` made), messages ``reset``/``step``/``state``/``close``/``mcp`` answered by
  ``observation``/``state``/``mcp`` frames or ``error`` frames with OpenEnv's codes (``INVALID_JSON``,
  ``UNKNOWN_TYPE``, ``VALIDATION_ERROR``, ``EXECUTION_ERROR``, ``CAPACITY_REACHED``, ``FACTORY_ERROR``,
  ``SESSION_ERROR``);
* HTTP ``GET /health /metadata /schema /state /openapi.json``, ``POST /reset /step`` (a fresh env per
  request: ``/step`` replays the episode from ``seed`` and ``history``, the earlier actions, sent next
  to the action) and ``POST /mcp`` (JSON-RPC ``tools/list``, ``tools/call``, ``openenv/session/create``,
  ``openenv/session/close``): tool envs (the ``tools`` wrapper) expose their tools there.

One :class:`GemEnvironment` per session. Nothing holds the server forever: a WebSocket session that
sends nothing for ``idle_timeout_s`` while the server waits on it is closed (code
:data:`IDLE_CLOSE_CODE`, its slot freed), HTTP sessions idle as long are dropped, ``reset`` and
``step`` run within ``step_timeout_s``, and calls that ran past it and still run (Python cannot stop a
thread) are counted: at ``max_hung_steps`` of them the server is degraded (``/health`` answers 503 and
resets and steps are refused until one ends). Every frame and body goes out as ASCII JSON, so text
with lone surrogates (which UTF-8 cannot encode) is escaped, never a crash.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from gem_core.core import Env, to_sync
from gem_core.errors import ConfigError, EnvStepTimeout, GemCoreError, ResetNeeded
from gem_core.loop import LoopThread
from gem_core.tools.base import Tool
from gem_core.tools.safety import UnsafeValue, clean_arguments
from gem_openenv.models import GemAction, GemObservation, GemState

__all__ = [
    "DEFAULT_IDLE_TIMEOUT_S",
    "DEFAULT_MAX_HUNG_STEPS",
    "IDLE_CLOSE_CODE",
    "GemAction",
    "GemEnvironment",
    "GemObservation",
    "GemState",
    "HungSteps",
    "build_app",
    "json_safe",
]

#: Seconds a WebSocket session may wait on its client before the server closes it (``gem serve --idle-timeout``).
DEFAULT_IDLE_TIMEOUT_S = 600.0
#: Calls past their time limit that may still run before the server is degraded (``gem serve --max-hung-steps``).
DEFAULT_MAX_HUNG_STEPS = 4
#: The WebSocket close code of a session closed for idleness (private range; 408 as in HTTP's Request Timeout).
IDLE_CLOSE_CODE = 4408


def json_safe(value: Any) -> Any:
    """``value`` as JSON types: numpy scalars become numbers, tuples lists, unknown objects their repr."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in value]
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        try:
            return json_safe(item())
        except (TypeError, ValueError):
            pass
    return repr(value)


def _tool_host(env: Any) -> tuple[dict[str, Tool], LoopThread | None]:
    """The tools of the first ``tools`` wrapper in ``env``'s wrapper chain, and the loop it runs them on."""
    seen = env
    while seen is not None:
        tools = getattr(seen, "tools", None)
        if isinstance(tools, dict) and tools and all(isinstance(t, Tool) for t in tools.values()):
            loop = getattr(seen, "_loop", None)
            return dict(tools), loop if isinstance(loop, LoopThread) else None
        seen = getattr(seen, "env", None)
    return {}, None


def tool_call(tool: Tool, loop: LoopThread | None) -> Callable[..., Awaitable[dict[str, Any]]]:
    """``await call(**arguments)``: the tool's result as ``{"output", "ok", "error"}``; never raises for arguments."""

    async def call(**arguments: Any) -> dict[str, Any]:
        try:  # the checks the tools wrapper makes on a model's arguments, before the tool sees them
            checked = clean_arguments(arguments, what=f"the arguments of {tool.name!r}")
        except UnsafeValue as exc:
            return {"output": "", "ok": False, "error": str(exc)}
        pending = tool.execute(checked)
        result = await (loop.run(pending) if loop is not None else pending)
        return {"output": result.render(), "ok": result.ok, "error": result.error}

    return call


class HungSteps:
    """The resets and steps of one server that ran past their time limit and still run, capped at ``limit``.

    Python cannot stop a thread, so each such call keeps its thread (and its abandoned env) until it
    returns by itself. At ``limit`` of them the server is degraded: new resets and steps are refused
    (no new thread starts) and ``/health`` says so, until one ends.

    Args:
        limit: How many may run at once before resets and steps are refused.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()

    def add(self, thread: threading.Thread) -> None:
        with self._lock:
            self._threads.add(thread)

    def count(self) -> int:
        """How many still run (ended ones are forgotten here)."""
        with self._lock:
            self._threads = {thread for thread in self._threads if thread.is_alive()}
            return len(self._threads)

    def degraded(self) -> str | None:
        """Why the server refuses resets and steps, or ``None`` while it takes them."""
        hung = self.count()
        if hung < self.limit:
            return None
        return (
            f"{hung} resets/steps ran past their time limit and still run (the cap, --max-hung-steps, is "
            f"{self.limit}); this server refuses resets and steps until one ends: fix or replace the env that "
            "hangs, or restart the server"
        )


class GemEnvironment:
    """One session's gem env, as OpenEnv's server protocol drives it (``reset``, ``step``, ``state``).

    A reset or step that raises or runs past ``step_timeout_s`` (or the request's ``timeout_s``) ends
    the episode: the client gets ``EXECUTION_ERROR`` naming the env and the cause, every later step is
    refused until a reset, and that reset runs on a new env (a hung call may still be running in the
    old one, which its thread closes when the call returns).

    Args:
        env_id: The registered gem id.
        make_kwargs: Constructor overrides for ``gem_core.make``.
        step_timeout_s: The longest one ``reset`` or ``step`` may take; ``None``: no limit.
        hung_steps: The server's count of calls past their limit (shared by its sessions); at its
            limit resets and steps are refused. ``None``: counted per environment.

    Raises:
        GemCoreError: the id or kwargs are wrong (the server answers ``FACTORY_ERROR``).
    """

    def __init__(
        self,
        env_id: str,
        make_kwargs: Mapping[str, Any] | None = None,
        step_timeout_s: float | None = None,
        hung_steps: HungSteps | None = None,
    ) -> None:
        self.env_id = env_id
        self.make_kwargs = dict(make_kwargs or {})
        self.step_timeout_s = step_timeout_s
        self.hung_steps = hung_steps or HungSteps(DEFAULT_MAX_HUNG_STEPS)
        #: The env is left to a thread whose call ran past its limit (that thread closes it, never this session).
        self._abandoned = False
        self._build()
        self._state = GemState(env_id=env_id)
        self._reset_done = False
        #: Why the last call failed; the next reset builds a new env.
        self._failed: str | None = None

    def _build(self) -> None:
        from gem_core.api import make

        self.env: Env = to_sync(make(self.env_id, **self.make_kwargs))
        #: The tools ``/mcp`` lists and calls, and the loop the tools wrapper runs them on.
        self.tools, self.tool_loop = _tool_host(self.env)

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: dict[str, Any] | None = None,
        timeout_s: float | None = None,
        **kwargs: Any,
    ) -> GemObservation:
        """Start an episode; keyword arguments other than ``seed``/``episode_id``/``timeout_s`` are reset options.

        Raises:
            ConfigError: ``seed`` is not an integer or ``options`` not an object.
            EnvStepTimeout: the reset ran past its time limit (a new env is built at the next reset).
        """
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ConfigError(f"'seed' must be an integer or null, got {seed!r:.100}")  # true would play seed 1
        if episode_id is not None and not isinstance(episode_id, str):
            raise ConfigError(f"'episode_id' must be a string or null, got {episode_id!r:.100}")
        if options is not None and not isinstance(options, Mapping):
            raise ConfigError(f"reset 'options' must be an object of the env's reset options, got {options!r:.200}")
        merged = {**(options or {}), **kwargs}
        if self._failed is not None:  # the old env's state is unknown (a hung call may still run in it)
            if not self._abandoned:  # an abandoned env is its thread's to close, after its call returns
                with contextlib.suppress(Exception):
                    self.env.close()
            self._build()
            self._failed = None
            self._abandoned = False
        self._reset_done = False
        env = self.env
        obs, info = self._timed("reset", lambda: env.reset(seed=seed, options=merged or None), timeout_s)
        self._state = GemState(env_id=self.env_id, episode_id=episode_id, seed=seed)
        self._reset_done = True
        return GemObservation(text=obs, reward=0.0, info=json_safe(info))

    def step(
        self,
        action: GemAction,
        timeout_s: float | None = None,
        seed: int | None = None,
        history: list[str] | None = None,
        **kwargs: Any,
    ) -> GemObservation:
        """One turn; ``seed`` and ``history`` (plain HTTP only) replay the episode first on a fresh env.

        Raises:
            ConfigError: an argument other than OpenEnv's ``request_id``, or a malformed ``seed``/``history``.
            ResetNeeded: no episode (no reset, the episode ended, or the last call failed).
            EnvStepTimeout: the step ran past its time limit (the episode is lost).
        """
        kwargs.pop("request_id", None)
        if kwargs:  # a misspelt 'history' would otherwise replay nothing: a silently different episode
            raise ConfigError(f"/step takes 'action', 'seed', 'history' and 'timeout_s'; unknown: {sorted(kwargs)}")
        if history is not None or seed is not None:
            self._replay(seed, history)
        elif self._failed is not None:
            raise ResetNeeded(f"this episode was lost ({self._failed}); reset to start a new one")
        elif not self._reset_done:
            raise ResetNeeded(
                "this session has no episode: send reset first (WebSocket), or, over OpenEnv's stateless "
                "HTTP /step, send 'seed' and 'history' (the earlier actions) next to the action"
            )
        elif self._state.done:
            raise ResetNeeded(f"{self.env_id}: the episode is over; send reset to start a new one")
        env, text = self.env, action.text
        obs, reward, terminated, truncated, info = self._timed("step", lambda: env.step(text), timeout_s)
        reward = float(reward)
        if not math.isfinite(reward):  # JSON has no NaN/inf: a client would read the frame as malformed
            self._failed, self._reset_done = f"the env gave the reward {reward}", False
            raise RuntimeError(f"{self.env_id}: the env gave a non-finite reward ({reward}); the episode is lost")
        state = self._state
        self._state = GemState(
            env_id=self.env_id,
            episode_id=state.episode_id,
            seed=state.seed,
            step_count=state.step_count + 1,
            episode_return=state.episode_return + reward,
            done=bool(terminated or truncated),
        )
        return GemObservation(
            text=obs,
            reward=reward,
            done=bool(terminated or truncated),
            terminated=bool(terminated),
            truncated=bool(truncated),
            info=json_safe(info),
        )

    def _timed(self, what: str, call: Callable[[], Any], timeout_s: float | None) -> Any:
        """``call()`` within the tighter of ``step_timeout_s`` and ``timeout_s``; a failure ends the episode."""
        limits = [t for t in (self.step_timeout_s, timeout_s) if t is not None]
        if limits and (why := self.hung_steps.degraded()) is not None:  # no new thread: the env is left as it is
            raise EnvStepTimeout(f"{self.env_id}: {what} refused: {why}")
        try:
            if not limits:
                return call()
            outcome: dict[str, Any] = {}
            settled = threading.Lock()  # the call's end and its abandonment: whichever comes first decides
            env = self.env

            def run() -> None:
                try:
                    outcome["result"] = call()
                except BaseException as exc:  # handed to the waiting thread as is
                    outcome["error"] = exc
                with settled:
                    outcome["done"] = True
                    abandoned = "abandoned" in outcome
                if abandoned:  # the session moved on to a new env; this one is this thread's to close
                    with contextlib.suppress(Exception):
                        env.close()

            worker = threading.Thread(target=run, name=f"gem-serve-step-{self.env_id}", daemon=True)
            worker.start()
            worker.join(min(limits))
            with settled:
                hung = "done" not in outcome
                if hung:
                    outcome["abandoned"] = True
            if hung:  # Python cannot stop the thread: the env is abandoned, the next reset builds anew
                self._abandoned = True
                self.hung_steps.add(worker)
                raise EnvStepTimeout(
                    f"{self.env_id}: {what} ran past {min(limits):g}s; the episode is lost: reset (a new env is built)"
                )
            if "error" in outcome:
                raise outcome["error"]
            return outcome["result"]
        except Exception as exc:
            self._failed = f"{what} raised {type(exc).__name__}: {exc}"
            self._reset_done = False
            if isinstance(exc, GemCoreError):
                raise
            raise RuntimeError(f"{self.env_id}: {self._failed}; the episode is lost: reset to start a new one") from exc

    def _replay(self, seed: Any, history: Any) -> None:
        if seed is None:
            raise ConfigError("replaying an episode over HTTP needs its 'seed' next to 'history'")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"'seed' must be an integer, got {seed!r:.100}")
        if history is None:
            history = []
        if not isinstance(history, list) or not all(isinstance(earlier, str) for earlier in history):
            raise ConfigError(f"'history' must be a list of the earlier actions' texts, got {history!r:.200}")
        self.reset(seed=seed)
        for earlier in history:
            result = self.step(GemAction(text=earlier))
            if result.done:
                raise ConfigError(f"'history' goes past the end of the episode (it ended after {earlier!r:.100})")

    @property
    def state(self) -> GemState:
        return self._state

    def metadata(self) -> dict[str, Any]:
        """OpenEnv's ``/metadata``: name, description, version."""
        spec = getattr(self.env, "spec", None)
        description = (getattr(spec, "description", "") or f"gem env {self.env_id}") + f" (gem id {self.env_id})"
        return {"name": self.env_id, "description": description, "version": gem_openenv_version()}

    def close(self) -> None:
        if not self._abandoned:  # else a hung call still runs in it; its thread closes it when the call returns
            self.env.close()


def gem_openenv_version() -> str:
    """The installed gem-openenv's version (``0`` from a source tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gem-openenv")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "0"


def build_app(
    env_id: str,
    make_kwargs: Mapping[str, Any] | None = None,
    *,
    max_sessions: int = 8,
    step_timeout_s: float | None = None,
    idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S,
    max_hung_steps: int = DEFAULT_MAX_HUNG_STEPS,
) -> Any:
    """The ASGI app serving ``env_id`` over OpenEnv's protocol, at most ``max_sessions`` sessions at once.

    ``step_timeout_s`` bounds each reset and step (see :class:`GemEnvironment`). A WebSocket session
    that sends nothing for ``idle_timeout_s`` while the server waits on it is closed with code
    :data:`IDLE_CLOSE_CODE` (its slot freed; sessions made over HTTP ``/mcp`` are dropped after as
    long idle); ``None`` or 0 keeps idle sessions forever. At ``max_hung_steps`` calls past their time
    limit still running, the server refuses resets and steps and ``/health`` answers 503 ``degraded``
    until one ends.

    Raises:
        ConfigError: a bound is not a positive number (``idle_timeout_s``: or 0/``None``).
        GemCoreError: ``env_id`` or ``make_kwargs`` do not build (checked once here, before serving).
    """
    from gem_openenv.app import make_app

    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise ConfigError(f"max_sessions must be an integer >= 1, got {max_sessions!r}")
    if step_timeout_s is not None and (
        isinstance(step_timeout_s, bool) or not isinstance(step_timeout_s, (int, float)) or not step_timeout_s > 0
    ):
        raise ConfigError(f"step_timeout_s must be seconds > 0 or None, got {step_timeout_s!r}")
    if idle_timeout_s is not None and (
        isinstance(idle_timeout_s, bool) or not isinstance(idle_timeout_s, (int, float)) or not idle_timeout_s >= 0
    ):
        raise ConfigError(f"idle_timeout_s must be seconds >= 0 (0 or None: no idle timeout), got {idle_timeout_s!r}")
    if isinstance(max_hung_steps, bool) or not isinstance(max_hung_steps, int) or max_hung_steps < 1:
        raise ConfigError(f"max_hung_steps must be an integer >= 1, got {max_hung_steps!r}")
    idle = float(idle_timeout_s) if idle_timeout_s and math.isfinite(idle_timeout_s) else None
    probe = GemEnvironment(env_id, make_kwargs)  # a wrong id or kwargs fails here, not per session
    probe.close()
    hung_steps = HungSteps(max_hung_steps)

    def factory() -> GemEnvironment:
        return GemEnvironment(env_id, dict(make_kwargs or {}), step_timeout_s, hung_steps)

    return make_app(
        factory,
        env_id=env_id,
        max_sessions=max_sessions,
        idle_timeout_s=idle,
        hung_steps=hung_steps,
        tool_timeout_s=step_timeout_s,
    )
