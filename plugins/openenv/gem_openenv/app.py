"""The Starlette app behind ``gem serve``: OpenEnv 0.10's wire protocol, sessions, bounds (no OpenEnv code).

:func:`gem_openenv.server.build_app` builds it; the protocol is described there and in docs/interop.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from gem_core.errors import ConfigError, EnvStepTimeout, GemCoreError
from gem_openenv.models import GemAction, GemObservation, GemState
from gem_openenv.server import IDLE_CLOSE_CODE, GemEnvironment, HungSteps, gem_openenv_version, tool_call

__all__ = ["make_app"]

# JSON-RPC 2.0 error codes (OpenEnv's /mcp uses the standard ones and -32000 for server errors).
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR, SERVER_ERROR = (
    -32700,
    -32600,
    -32601,
    -32602,
    -32603,
    -32000,
)


def dumps(value: Any) -> str:
    """JSON as ASCII: a lone surrogate (which UTF-8 cannot encode) goes out escaped, never as a crash."""
    return json.dumps(value, ensure_ascii=True, default=repr)


def json_response(body: Any, status: int = 200) -> Response:
    return Response(dumps(body), status_code=status, media_type="application/json")


def observation_frame(observation: GemObservation) -> dict[str, Any]:
    """OpenEnv's observation payload: every field but ``reward``/``done`` inside ``observation``."""
    fields = observation.model_dump(exclude={"reward", "done"})
    payload: dict[str, Any] = {"observation": fields, "reward": observation.reward, "done": observation.done}
    if observation.metadata:
        payload["metadata"] = observation.metadata
    return payload


class CapacityReached(Exception):
    """Every session slot is taken."""


class FactoryError(Exception):
    """The env of a new session did not build."""


class Session:
    """One session: its env, the one thread its resets and steps run on, when it was last used."""

    def __init__(self, env: GemEnvironment, executor: ThreadPoolExecutor) -> None:
        self.env = env
        self.executor = executor
        self.last_used = time.monotonic()
        #: A WebSocket carries it (its own, or one attached to an HTTP-made session).
        self.attached = False

    async def run(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.last_used = time.monotonic()
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self.executor, functools.partial(call, *args, **kwargs)
            )
        finally:
            self.last_used = time.monotonic()


class Sessions:
    """The server's sessions, at most ``limit`` at once (``None`` marks a slot whose env is being built)."""

    def __init__(self, factory: Callable[[], GemEnvironment], limit: int, idle_timeout_s: float | None) -> None:
        self.factory = factory
        self.limit = limit
        self.idle_timeout_s = idle_timeout_s
        self.live: dict[str, Session | None] = {}
        self.lock = asyncio.Lock()

    async def create(self) -> tuple[str, Session]:
        """A new session (its env built on its own thread).

        Raises:
            CapacityReached: all ``limit`` slots are taken.
            FactoryError: the env did not build.
        """
        await self.reap_idle()
        async with self.lock:
            if len(self.live) >= self.limit:
                raise CapacityReached(
                    f"server at capacity: {len(self.live)} of {self.limit} sessions in use "
                    "(gem serve --max-sessions N allows more)"
                )
            session_id = uuid.uuid4().hex
            self.live[session_id] = None  # the slot is held while the env builds
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"gem-serve-session-{session_id[:8]}")
        try:
            env = await asyncio.get_running_loop().run_in_executor(executor, self.factory)
        except Exception as exc:
            executor.shutdown(wait=False)
            async with self.lock:
                self.live.pop(session_id, None)
            raise FactoryError(f"the env did not build: {type(exc).__name__}: {exc}") from exc
        session = Session(env, executor)
        async with self.lock:
            self.live[session_id] = session
        return session_id, session

    async def destroy(self, session_id: str) -> None:
        async with self.lock:
            session = self.live.pop(session_id, None)
        if session is not None:
            # The close runs on the session's thread, behind any call still running there (never beside it).
            closing = asyncio.get_running_loop().run_in_executor(session.executor, session.env.close)
            session.executor.shutdown(wait=False)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(closing), 5)

    async def reap_idle(self) -> None:
        """Drop sessions made over HTTP ``/mcp`` and left unattached past the idle timeout."""
        if self.idle_timeout_s is None:
            return
        now = time.monotonic()
        async with self.lock:
            stale = [
                key
                for key, session in self.live.items()
                if session is not None and not session.attached and now - session.last_used > self.idle_timeout_s
            ]
        for key in stale:
            await self.destroy(key)


def make_app(
    factory: Callable[[], GemEnvironment],
    *,
    env_id: str,
    max_sessions: int,
    idle_timeout_s: float | None,
    hung_steps: HungSteps,
    tool_timeout_s: float | None,
) -> Starlette:
    """The app (see :func:`gem_openenv.server.build_app`, which checks the arguments)."""
    sessions = Sessions(factory, max_sessions, idle_timeout_s)

    async def fresh(call: Callable[[GemEnvironment], Any]) -> Any:
        """``call(env)`` on an env of its own (OpenEnv's stateless HTTP), closed after."""

        def run() -> Any:
            env = factory()
            try:
                return call(env)
            finally:
                env.close()

        return await asyncio.to_thread(run)

    async def health(request: Request) -> Response:
        why = hung_steps.degraded()
        if why is not None:
            return json_response({"status": "degraded", "detail": why}, 503)
        return json_response({"status": "healthy"})

    async def metadata(request: Request) -> Response:
        return json_response(await fresh(lambda env: env.metadata()))

    async def schema(request: Request) -> Response:
        observation = GemObservation.model_json_schema()
        return json_response(
            {
                "action": GemAction.model_json_schema(),
                "observation": observation,
                "reset_observation": observation,
                "state": GemState.model_json_schema(),
            }
        )

    async def state(request: Request) -> Response:
        return json_response(await fresh(lambda env: env.state.model_dump()))

    async def openapi(request: Request) -> Response:
        operations = {
            "/health": "get",
            "/metadata": "get",
            "/schema": "get",
            "/state": "get",
            "/reset": "post",
            "/step": "post",
            "/mcp": "post",
        }
        return json_response(
            {
                "openapi": "3.1.0",
                "info": {"title": f"gem serve {env_id}", "version": gem_openenv_version()},
                "paths": {
                    path: {method: {"responses": {"200": {"description": "OK"}}}} for path, method in operations.items()
                },
            }
        )

    async def read_object(request: Request, *, empty_ok: bool) -> dict[str, Any]:
        body = await request.body()
        if not body.strip() and empty_ok:
            return {}
        try:
            value = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"the request body is not JSON ({str(exc)[:120]})") from None
        if not isinstance(value, dict):
            raise ConfigError(f"the request body is JSON {type(value).__name__}, not an object")
        return value

    async def http_reset(request: Request) -> Response:
        body = await read_object(request, empty_ok=True)
        seed = body.get("seed")
        if isinstance(seed, int) and not isinstance(seed, bool) and seed < 0:
            raise ConfigError(f"'seed' must be >= 0, got {seed}")
        observation = await fresh(lambda env: env.reset(**body))
        return json_response(observation_frame(observation))

    async def http_step(request: Request) -> Response:
        body = await read_object(request, empty_ok=False)
        if not isinstance(body.get("action"), dict):
            raise ConfigError("/step takes {'action': {'text': ...}} (and 'seed', 'history', 'timeout_s')")
        action = GemAction.model_validate(body.pop("action"))
        timeout_s = body.get("timeout_s")
        if timeout_s is not None and (
            isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0
        ):
            raise ConfigError(f"'timeout_s' must be seconds > 0, got {timeout_s!r:.60}")
        observation = await fresh(lambda env: env.step(action, **body))
        return json_response(observation_frame(observation))

    async def mcp(request: Request) -> Response:
        try:
            message = json.loads(await request.body())
        except (ValueError, RecursionError):
            return json_response(rpc_error(None, PARSE_ERROR, "Parse error"))
        return json_response(await handle_rpc(message, None))

    def rpc_error(request_id: Any, code: int, message: str) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}

    def rpc_result(request_id: Any, result: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    async def handle_rpc(message: Any, own: Session | None) -> dict[str, Any]:
        """One JSON-RPC request of ``/mcp`` or of a WebSocket ``mcp`` message (``own``: that socket's session)."""
        if (
            not isinstance(message, dict)
            or message.get("jsonrpc") != "2.0"
            or not isinstance(message.get("method"), str)
        ):
            request_id = message.get("id") if isinstance(message, dict) else None
            return rpc_error(request_id, INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 request with a method")
        request_id, method, params = message.get("id"), message["method"], message.get("params", {})
        if not isinstance(params, dict):
            return rpc_error(request_id, INVALID_PARAMS, "Params must be an object")
        if method == "openenv/session/create":
            try:
                session_id, _ = await sessions.create()
            except (CapacityReached, FactoryError) as exc:
                return rpc_error(request_id, SERVER_ERROR, str(exc))
            return rpc_result(request_id, {"session_id": session_id})
        if method == "openenv/session/close":
            target = params.get("session_id")
            if not isinstance(target, str) or target not in sessions.live:
                return rpc_error(request_id, INVALID_PARAMS, f"Unknown session_id: {target!r:.80}")
            held = sessions.live[target]
            if held is not None and held.attached:
                return rpc_error(
                    request_id, INVALID_REQUEST, "Cannot close a session a WebSocket holds; close the socket"
                )
            await sessions.destroy(target)
            return rpc_result(request_id, {"session_id": target, "closed": True})
        if method not in ("tools/list", "tools/call"):
            return rpc_error(request_id, METHOD_NOT_FOUND, f"Method not found: {method[:80]}")
        session = own
        if session is None and params.get("session_id") is not None:
            session = sessions.live.get(str(params["session_id"]))
            if session is None:
                return rpc_error(request_id, INVALID_PARAMS, f"Unknown session_id: {params['session_id']!r:.80}")
        try:
            if session is not None:
                session.last_used = time.monotonic()
                return await tools_rpc(session.env, request_id, method, params)
            env = await asyncio.to_thread(factory)
            try:
                return await tools_rpc(env, request_id, method, params)
            finally:
                await asyncio.to_thread(env.close)
        except Exception as exc:  # a tool that failed is the caller's JSON-RPC error, never a dropped request
            return rpc_error(request_id, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")

    async def tools_rpc(env: GemEnvironment, request_id: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if not env.tools:
            return rpc_error(request_id, INTERNAL_ERROR, f"Environment does not support MCP ({env_id} has no tools)")
        if method == "tools/list":
            tools = [
                {"name": tool.name, "description": tool.description, "inputSchema": tool.parameters}
                for tool in env.tools.values()
            ]
            return rpc_result(request_id, {"tools": tools})
        name, arguments = params.get("name"), params.get("arguments", {})
        if not isinstance(name, str) or not name:
            return rpc_error(request_id, INVALID_PARAMS, "Missing 'name' in params")
        if not isinstance(arguments, dict):
            return rpc_error(request_id, INVALID_PARAMS, "'arguments' must be an object")
        if name not in env.tools:
            return rpc_error(request_id, INVALID_PARAMS, f"Tool not found: {name[:80]}")
        call = tool_call(env.tools[name], env.tool_loop)(**arguments)
        try:
            result = await asyncio.wait_for(call, tool_timeout_s)
        except asyncio.TimeoutError:
            return rpc_error(request_id, INTERNAL_ERROR, f"tool {name!r} ran past {tool_timeout_s:g}s (--step-timeout)")
        return rpc_result(request_id, result)

    async def websocket_session(socket: WebSocket) -> None:
        await socket.accept()
        requested = socket.query_params.get("session_id")
        owned = requested is None
        try:
            if owned:
                session_id, session = await sessions.create()
            else:
                session_id = str(requested)
                held = sessions.live.get(session_id)
                if held is None or held.attached:
                    why = "is unknown or still building" if held is None else "already has a WebSocket"
                    raise RuntimeError(f"session {session_id[:80]!r} {why}")
                session = held
            session.attached = True
        except CapacityReached as exc:
            await refuse(socket, str(exc), "CAPACITY_REACHED")
            return
        except FactoryError as exc:
            await refuse(socket, str(exc), "FACTORY_ERROR")
            return
        except Exception as exc:
            await refuse(socket, str(exc), "SESSION_ERROR")
            return
        try:
            await serve_socket(socket, session)
        finally:
            session.attached = False
            session.last_used = time.monotonic()
            if owned:
                await sessions.destroy(session_id)
            with contextlib.suppress(Exception):
                await socket.close()

    async def refuse(socket: WebSocket, message: str, code: str) -> None:
        with contextlib.suppress(Exception):
            await socket.send_text(dumps({"type": "error", "data": {"message": message, "code": code}}))
            await socket.close()

    async def serve_socket(socket: WebSocket, session: Session) -> None:
        while True:
            try:
                incoming = await asyncio.wait_for(socket.receive(), idle_timeout_s)
            except asyncio.TimeoutError:
                reason = f"idle for {idle_timeout_s:g}s (gem serve --idle-timeout): session closed"
                with contextlib.suppress(Exception):
                    await socket.close(code=IDLE_CLOSE_CODE, reason=reason)
                return
            if incoming["type"] == "websocket.disconnect":
                return
            raw = incoming.get("text")
            if raw is None:
                raw = (incoming.get("bytes") or b"").decode("utf-8", "replace")
            try:
                message = json.loads(raw)
            except (ValueError, RecursionError) as exc:  # not JSON, or an integer longer than Python reads
                await send_error(socket, f"Invalid JSON: {str(exc)[:200]}", "INVALID_JSON")
                continue
            kind = message.get("type") if isinstance(message, dict) else None
            if kind == "close":
                return
            try:
                frame = await answer(message, kind, session)
            except ValidationError as exc:
                await send_error(socket, "Invalid message", "VALIDATION_ERROR", errors=exc.errors(include_url=False))
                continue
            except _Invalid as exc:
                await send_error(socket, str(exc), "VALIDATION_ERROR")
                continue
            except Exception as exc:
                await send_error(socket, str(exc), "EXECUTION_ERROR")
                continue
            try:
                await socket.send_text(dumps(frame))
            except (WebSocketDisconnect, RuntimeError):
                return

    async def answer(message: Any, kind: Any, session: Session) -> dict[str, Any]:
        if kind not in ("reset", "step", "state", "mcp"):
            if not isinstance(message, dict):
                raise _Invalid(f"a message is a JSON object with a 'type', got JSON {type(message).__name__}")
            return {"type": "error", "data": {"message": f"Unknown message type: {kind!r:.60}", "code": "UNKNOWN_TYPE"}}
        data = message.get("data", {})
        if kind == "state":
            return {"type": "state", "data": session.env.state.model_dump()}
        if not isinstance(data, dict):
            raise _Invalid(f"a {kind} message's 'data' is an object, got JSON {type(data).__name__}")
        if kind == "mcp":
            return {"type": "mcp", "data": await handle_rpc(data, session)}
        if kind == "reset":
            observation = await session.run(session.env.reset, **data)
        else:
            action = GemAction.model_validate(data)
            observation = await session.run(session.env.step, action)
        return {"type": "observation", "data": observation_frame(observation)}

    async def send_error(socket: WebSocket, message: str, code: str, **extra: Any) -> None:
        with contextlib.suppress(Exception):
            await socket.send_text(dumps({"type": "error", "data": {"message": message[:4000], "code": code, **extra}}))

    async def gem_error(request: Request, exc: Exception) -> Response:
        # A malformed request is 422, a timed-out call 504, a request the episode's state refuses 409.
        if isinstance(exc, ValidationError):
            return json_response({"detail": exc.errors(include_url=False), "error": "ValidationError"}, 422)
        status = 422 if isinstance(exc, ConfigError) else 504 if isinstance(exc, EnvStepTimeout) else 409
        return json_response({"detail": str(exc), "error": type(exc).__name__}, status)

    async def server_error(request: Request, exc: Exception) -> Response:
        return json_response({"detail": f"{type(exc).__name__}: {exc}", "error": type(exc).__name__}, 500)

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/metadata", metadata, methods=["GET"]),
            Route("/schema", schema, methods=["GET"]),
            Route("/state", state, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
            Route("/reset", http_reset, methods=["POST"]),
            Route("/step", http_step, methods=["POST"]),
            Route("/mcp", mcp, methods=["POST"]),
            WebSocketRoute("/ws", websocket_session),
        ],
        exception_handlers={GemCoreError: gem_error, ValidationError: gem_error, Exception: server_error},
    )


class _Invalid(Exception):
    """A WebSocket message of the wrong shape (answered ``VALIDATION_ERROR``)."""
