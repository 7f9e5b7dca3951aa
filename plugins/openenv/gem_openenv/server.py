"""Any registered gem env as an OpenEnv 0.10 environment, built with OpenEnv's own server factory.

One :class:`GemEnvironment` per OpenEnv session: the factory builds the gem env (so a bad id
or kwargs is OpenEnv's ``FACTORY_ERROR``), ``reset`` takes ``seed``, ``episode_id`` and the env's
reset options, ``step`` takes :class:`GemAction` (the model's text) and answers a
:class:`GemObservation` that carries the turn's reward, ``terminated`` and ``truncated`` (OpenEnv's
``done`` is either). Tool envs (the ``tools`` wrapper) expose their tools as an MCP server, the
attribute OpenEnv's ``/mcp`` and WebSocket ``mcp`` messages read (``tools/list``, ``tools/call``).

OpenEnv's plain HTTP ``/reset`` and ``/step`` build a fresh env per request; ``/step`` replays
the episode from ``seed`` and ``history`` (the earlier actions) sent next to the action, so a
stateless client gets the same episode as a WebSocket session.

Nothing holds the server forever: a WebSocket session that sends nothing for ``idle_timeout_s``
while the server waits on it is closed (its slot freed), and steps that ran past their time limit
and still run (Python cannot stop a thread) are counted: at ``max_hung_steps`` of them the server
is degraded (``/health`` answers 503 and steps are refused until one ends), so hung steps leave a
bounded number of threads behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

from gem_core.core import Env, to_sync
from gem_core.errors import ConfigError, EnvStepTimeout, GemCoreError, ResetNeeded
from gem_core.loop import LoopThread
from gem_core.tools.base import Tool
from gem_core.tools.safety import UnsafeValue, clean_arguments

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
#: Steps past their time limit that may still run before the server is degraded (``gem serve --max-hung-steps``).
DEFAULT_MAX_HUNG_STEPS = 4
#: The WebSocket close code of a session closed for idleness (private range; 408 as in HTTP's Request Timeout).
IDLE_CLOSE_CODE = 4408


class GemAction(Action):
    """One turn of the agent: the model's reply, as text (gem envs parse it themselves)."""

    text: str = Field(description="The model's reply for this turn (gem envs take raw text).")


class GemObservation(Observation):
    """What a gem env answers; ``done`` is ``terminated or truncated``, ``reward`` is this turn's alone."""

    text: str = Field(default="", description="The observation shown to the model.")
    terminated: bool = Field(default=False, description="The task ended (solved, failed); no future value.")
    truncated: bool = Field(default=False, description="Cut from outside the task (turn limit); not terminal.")
    info: dict[str, Any] = Field(default_factory=dict, description="The gem env's info dict (JSON-safe).")


class GemState(State):
    """The session's episode: which env, its seed, the turns taken and the return so far."""

    env_id: str = Field(default="", description="The gem id this server plays.")
    seed: int | None = Field(default=None, description="The seed of the current episode.")
    episode_return: float = Field(default=0.0, description="Sum of this episode's rewards.")
    done: bool = Field(default=False, description="The episode ended (terminated or truncated).")


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


def _mcp_server(name: str, tools: dict[str, Tool], loop: LoopThread | None) -> Any:
    """A FastMCP server with one tool per gem tool (its JSON schema, its description, its ``execute``).

    Calls run on ``loop``, the tools wrapper's own, where the same tools run the model's text calls:
    tools that hold loop-bound resources (worker pools, sessions) see one loop only.
    """
    from fastmcp import FastMCP
    from fastmcp.tools import FunctionTool

    server = FastMCP(name)
    for tool in tools.values():
        call = _tool_call(tool, loop)
        server.add_tool(
            FunctionTool(
                name=tool.name,
                description=tool.description,
                parameters=tool.parameters,
                fn=call,
            )
        )
    return server


def _tool_call(tool: Tool, loop: LoopThread | None) -> Callable[..., Awaitable[dict[str, Any]]]:
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
    """The steps of one server that ran past their time limit and still run, capped at ``limit``.

    Python cannot stop a thread, so each such step keeps its thread (and its abandoned env) until it
    returns by itself. At ``limit`` of them the server is degraded: new steps are refused (no new
    thread starts) and ``/health`` says so, until one ends.

    Args:
        limit: How many may run at once before steps are refused.
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
        """Why the server refuses steps, or ``None`` while it takes them."""
        hung = self.count()
        if hung < self.limit:
            return None
        return (
            f"{hung} steps ran past their time limit and still run (the cap, --max-hung-steps, is {self.limit}); "
            "this server refuses steps until one ends: fix or replace the env that hangs, or restart the server"
        )


class GemEnvironment(Environment[GemAction, GemObservation, GemState]):
    """An OpenEnv environment playing one gem id; OpenEnv builds one per session.

    A step that raises or runs past ``step_timeout_s`` (or the request's ``timeout_s``) ends the
    episode: the client gets OpenEnv's ``EXECUTION_ERROR`` naming the env and the cause, every later
    step is refused until a reset, and that reset runs on a new env (a hung step may still be running
    in the old one, which its thread closes when the step returns).

    Args:
        env_id: The registered gem id.
        make_kwargs: Constructor overrides for ``gem_core.make``.
        step_timeout_s: The longest one ``step`` may take; ``None``: no limit.
        hung_steps: The server's count of steps past their limit (shared by its sessions); at its
            limit steps are refused. ``None``: counted per environment.

    Raises:
        GemCoreError: the id or kwargs are wrong (OpenEnv reports ``FACTORY_ERROR``).
    """

    # Each session builds its own gem env; gem envs keep no shared mutable state.
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self,
        env_id: str,
        make_kwargs: Mapping[str, Any] | None = None,
        step_timeout_s: float | None = None,
        hung_steps: HungSteps | None = None,
    ) -> None:
        super().__init__()
        self.env_id = env_id
        self.make_kwargs = dict(make_kwargs or {})
        self.step_timeout_s = step_timeout_s
        self.hung_steps = hung_steps or HungSteps(DEFAULT_MAX_HUNG_STEPS)
        #: The env is left to a step thread that ran past its limit (that thread closes it, never this session).
        self._abandoned = False
        self._build()
        self._state = GemState(env_id=env_id)
        self._reset_done = False
        #: Why the last step failed; the next reset builds a new env.
        self._failed: str | None = None

    def _build(self) -> None:
        from gem_core.api import make

        self.env: Env = to_sync(make(self.env_id, **self.make_kwargs))
        tools, loop = _tool_host(self.env)
        # OpenEnv's /mcp and WebSocket "mcp" messages read this attribute (tools/list, tools/call).
        self.mcp_server = _mcp_server(self.env_id, tools, loop) if tools else None

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> GemObservation:
        """Start an episode; keyword arguments other than ``seed``/``episode_id`` are reset options."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ConfigError(f"'seed' must be an integer or null, got {seed!r:.100}")  # true would play seed 1
        if options is not None and not isinstance(options, Mapping):
            raise ConfigError(f"reset 'options' must be an object of the env's reset options, got {options!r:.200}")
        merged = {**(options or {}), **kwargs}
        if self._failed is not None:  # the old env's state is unknown (a hung step may still run in it)
            if not self._abandoned:  # an abandoned env is its step thread's to close, after its step returns
                with contextlib.suppress(Exception):
                    self.env.close()
            self._build()
            self._failed = None
            self._abandoned = False
        self._reset_done = False
        obs, info = self.env.reset(seed=seed, options=merged or None)
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
            ResetNeeded: no episode (no reset, the episode ended, or the last step failed).
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
        obs, reward, terminated, truncated, info = self._timed_step(action.text, timeout_s)
        state = self._state
        self._state = GemState(
            env_id=self.env_id,
            episode_id=state.episode_id,
            seed=state.seed,
            step_count=state.step_count + 1,
            episode_return=state.episode_return + float(reward),
            done=bool(terminated or truncated),
        )
        return GemObservation(
            text=obs,
            reward=float(reward),
            done=bool(terminated or truncated),
            terminated=bool(terminated),
            truncated=bool(truncated),
            info=json_safe(info),
        )

    def _timed_step(self, text: str, timeout_s: float | None) -> Any:
        """``env.step(text)`` within the tighter of ``step_timeout_s`` and ``timeout_s``; a failure ends the episode."""
        limits = [t for t in (self.step_timeout_s, timeout_s) if t is not None]
        if limits and (why := self.hung_steps.degraded()) is not None:  # no new thread: the env is left as it is
            raise EnvStepTimeout(f"{self.env_id}: step refused: {why}")
        try:
            if not limits:
                return self.env.step(text)
            outcome: dict[str, Any] = {}
            settled = threading.Lock()  # the step's end and its abandonment: whichever comes first decides
            env = self.env

            def run() -> None:
                try:
                    outcome["result"] = env.step(text)
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
                    f"{self.env_id}: step ran past {min(limits):g}s; the episode is lost: reset (a new env is built)"
                )
            if "error" in outcome:
                raise outcome["error"]
            return outcome["result"]
        except Exception as exc:
            self._failed = f"step raised {type(exc).__name__}: {exc}"
            self._reset_done = False
            if isinstance(exc, GemCoreError):
                raise
            raise RuntimeError(f"{self.env_id}: {self._failed}; the episode is lost: reset to start a new one") from exc

    def _replay(self, seed: Any, history: Any) -> None:
        if seed is None:
            raise ConfigError("replaying an episode over HTTP needs its 'seed' next to 'history'")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"'seed' must be an integer, got {seed!r}")
        if history is None:
            history = []
        if not isinstance(history, list) or not all(isinstance(earlier, str) for earlier in history):
            raise ConfigError(f"'history' must be a list of the earlier actions' texts, got {history!r:.200}")
        self.reset(seed=seed)
        for earlier in history:
            result = self.step(GemAction(text=earlier))
            if result.done:
                raise ConfigError(f"'history' goes past the end of the episode (it ended after {earlier!r})")

    @property
    def state(self) -> GemState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        spec = getattr(self.env, "spec", None)
        return EnvironmentMetadata(
            name=self.env_id,
            description=(getattr(spec, "description", "") or f"gem env {self.env_id}") + f" (gem id {self.env_id})",
            version=_gem_version(),
        )

    def close(self) -> None:
        if not self._abandoned:  # else a hung step still runs in it; its thread closes it when the step returns
            self.env.close()


def _gem_version() -> str:
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
    """OpenEnv's FastAPI app (``create_app``) serving ``env_id``, at most ``max_sessions`` sessions at once.

    ``step_timeout_s`` bounds each step (see :class:`GemEnvironment`). A WebSocket session that sends
    nothing for ``idle_timeout_s`` while the server waits on it is closed with code
    :data:`IDLE_CLOSE_CODE` (its slot freed; OpenEnv's HTTP sessions are reaped after as long idle);
    ``None`` or 0 keeps idle sessions forever. At ``max_hung_steps`` steps past their time limit still
    running, the server refuses steps and ``/health`` answers 503 ``degraded`` until one ends.

    Raises:
        ConfigError: a bound is not a positive number (``idle_timeout_s``: or 0/``None``).
        GemCoreError: ``env_id`` or ``make_kwargs`` do not build (checked once here, before serving).
    """
    from openenv.core.env_server.types import ConcurrencyConfig

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
    factory = functools.partial(GemEnvironment, env_id, dict(make_kwargs or {}), step_timeout_s, hung_steps)
    app = create_app(
        factory,
        GemAction,
        GemObservation,
        env_name=env_id.replace(":", "_"),
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle),
        state_cls=GemState,
    )
    # Plain HTTP /reset and /step: a gem error is the client's to fix (409 with gem's message), not a bare 500.
    # The WebSocket path answers its own EXECUTION_ERROR frames and never reaches this handler.
    app.add_exception_handler(GemCoreError, _gem_error_response)
    app.add_middleware(_Bounds, idle_timeout_s=idle, hung_steps=hung_steps)
    app.state.hung_steps = hung_steps
    return app


class _Bounds:
    """ASGI middleware: closes WebSocket sessions idle past ``idle_timeout_s``; ``/health`` says when degraded.

    Idle means the server waits for the client's next message (a step still running is not idle) and
    WebSocket pings do not count: a client that holds a session without using it loses it.
    """

    def __init__(self, app: Any, *, idle_timeout_s: float | None, hung_steps: HungSteps) -> None:
        self.app = app
        self.idle_timeout_s = idle_timeout_s
        self.hung_steps = hung_steps

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("path") == "/health":
            why = self.hung_steps.degraded()
            if why is not None:
                await _send_json(send, 503, {"status": "degraded", "detail": why})
                return
        if scope["type"] != "websocket" or self.idle_timeout_s is None:
            await self.app(scope, receive, send)
            return
        idle_timeout_s = self.idle_timeout_s
        pending: asyncio.Future[Any] | None = None  # the client's next message, kept across waits (never lost)
        closed = False

        async def bounded_receive() -> Any:
            nonlocal pending, closed
            if closed:
                return {"type": "websocket.disconnect", "code": IDLE_CLOSE_CODE}
            if pending is None:
                pending = asyncio.ensure_future(receive())
            done, _ = await asyncio.wait({pending}, timeout=idle_timeout_s)
            if not done:
                closed = True
                reason = f"idle for {idle_timeout_s:g}s (gem serve --idle-timeout): session closed"
                await send({"type": "websocket.close", "code": IDLE_CLOSE_CODE, "reason": reason})
                return {"type": "websocket.disconnect", "code": IDLE_CLOSE_CODE}  # the app frees the session
            message, pending = pending.result(), None
            return message

        async def guarded_send(message: dict[str, Any]) -> None:
            if not closed:  # after an idle close the app's own close (or a late frame) has no socket to go to
                await send(message)

        try:
            await self.app(scope, bounded_receive, guarded_send)
        finally:
            if pending is not None:
                pending.cancel()


async def _send_json(send: Any, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


async def _gem_error_response(request: Any, exc: Exception) -> Any:
    from fastapi.responses import JSONResponse

    # A malformed request is 422, a timed-out step 504, a request the episode's state refuses 409.
    status = 422 if isinstance(exc, ConfigError) else 504 if isinstance(exc, EnvStepTimeout) else 409
    return JSONResponse(status_code=status, content={"detail": str(exc), "error": type(exc).__name__})
