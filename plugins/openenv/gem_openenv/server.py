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
"""

from __future__ import annotations

import contextlib
import functools
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

__all__ = ["GemAction", "GemEnvironment", "GemObservation", "GemState", "build_app", "json_safe"]


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


class GemEnvironment(Environment[GemAction, GemObservation, GemState]):
    """An OpenEnv environment playing one gem id; OpenEnv builds one per session.

    A step that raises or runs past ``step_timeout_s`` (or the request's ``timeout_s``) ends the
    episode: the client gets OpenEnv's ``EXECUTION_ERROR`` naming the env and the cause, every later
    step is refused until a reset, and that reset runs on a new env (a hung step may still be running
    in the old one).

    Args:
        env_id: The registered gem id.
        make_kwargs: Constructor overrides for ``gem_core.make``.
        step_timeout_s: The longest one ``step`` may take; ``None``: no limit.

    Raises:
        GemCoreError: the id or kwargs are wrong (OpenEnv reports ``FACTORY_ERROR``).
    """

    # Each session builds its own gem env; gem envs keep no shared mutable state.
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self, env_id: str, make_kwargs: Mapping[str, Any] | None = None, step_timeout_s: float | None = None
    ) -> None:
        super().__init__()
        self.env_id = env_id
        self.make_kwargs = dict(make_kwargs or {})
        self.step_timeout_s = step_timeout_s
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
            with contextlib.suppress(Exception):
                self.env.close()
            self._build()
            self._failed = None
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
        try:
            if not limits:
                return self.env.step(text)
            outcome: dict[str, Any] = {}

            def run() -> None:
                try:
                    outcome["result"] = self.env.step(text)
                except BaseException as exc:  # handed to the waiting thread as is
                    outcome["error"] = exc

            worker = threading.Thread(target=run, name=f"gem-serve-step-{self.env_id}", daemon=True)
            worker.start()
            worker.join(min(limits))
            if worker.is_alive():  # Python cannot stop the thread: the env is abandoned, the next reset builds anew
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
) -> Any:
    """OpenEnv's FastAPI app (``create_app``) serving ``env_id``, at most ``max_sessions`` sessions at once.

    ``step_timeout_s`` bounds each step (see :class:`GemEnvironment`).

    Raises:
        GemCoreError: ``env_id`` or ``make_kwargs`` do not build (checked once here, before serving).
    """
    probe = GemEnvironment(env_id, make_kwargs)  # a wrong id or kwargs fails here, not per session
    probe.close()
    factory = functools.partial(GemEnvironment, env_id, dict(make_kwargs or {}), step_timeout_s)
    app = create_app(
        factory,
        GemAction,
        GemObservation,
        env_name=env_id.replace(":", "_"),
        max_concurrent_envs=max_sessions,
        state_cls=GemState,
    )
    # Plain HTTP /reset and /step: a gem error is the client's to fix (409 with gem's message), not a bare 500.
    # The WebSocket path answers its own EXECUTION_ERROR frames and never reaches this handler.
    app.add_exception_handler(GemCoreError, _gem_error_response)
    return app


async def _gem_error_response(request: Any, exc: Exception) -> Any:
    from fastapi.responses import JSONResponse

    # A malformed request is 422, a timed-out step 504, a request the episode's state refuses 409.
    status = 422 if isinstance(exc, ConfigError) else 504 if isinstance(exc, EnvStepTimeout) else 409
    return JSONResponse(status_code=status, content={"detail": str(exc), "error": type(exc).__name__})
