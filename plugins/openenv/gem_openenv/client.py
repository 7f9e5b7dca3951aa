"""Any OpenEnv 0.10 env server as a gem :class:`~gem_core.Env`, over OpenEnv's wire protocol spoken by gem's code.

No OpenEnv code runs here (gem-openenv installs beside packages whose pins exclude OpenEnv's): one
WebSocket session per gem env (:class:`WireSession`: opened at the first ``reset``, closed by ``close``),
the messages and frames OpenEnv 0.10's ``GenericEnvClient`` exchanges. The action
is built from the server's ``/schema``: an action with one text field gets the model's raw text,
any other action is a JSON object the model writes (checked against the schema; text that does
not fit is a format error whose message names the schema, or :class:`~gem_core.errors.ActionSchemaError`
with ``on_bad_action="raise"``). Each step's reward is the server's reward for that step; OpenEnv's
``done`` is ``terminated``, unless the observation says ``truncated`` (as gem's own server does).

Seeds past ``max_seed`` (default ``2**32 - 1``, what numpy-seeded OpenEnv envs take; unlimited against
``gem serve``) are folded into range by a stable hash; lone surrogates in the text go out as U+FFFD
(:func:`wire_safe`); a boolean ``success`` the server reports (observation or metadata) is ``info["success"]``.

Faults: ``CAPACITY_REACHED`` is retried with exponential backoff up to ``capacity_wait_s``, then
:class:`~gem_core.errors.EnvServerAtCapacity`; a server that is gone or goes away is
:class:`~gem_core.errors.EnvServerUnavailable`; any other error frame is
:class:`~gem_core.errors.EnvServerError` with OpenEnv's error code.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import time
from typing import Any, ClassVar, Literal

from gem_core.core import Env, ResetReturn, StepReturn, require_text_action
from gem_core.errors import (
    ActionSchemaError,
    ConfigError,
    EnvServerAtCapacity,
    EnvServerError,
    EnvServerUnavailable,
    ResetNeeded,
)
from gem_openenv.render import render_observation, render_tools

__all__ = [
    "DEFAULT_MAX_SEED",
    "ActionFormat",
    "OpenEnvEnv",
    "ServerErrorFrame",
    "WireSession",
    "error_code",
    "wire_safe",
]

#: Fields every OpenEnv action/observation has that are not the model's to write or read.
_PROTOCOL_FIELDS = frozenset({"metadata", "done", "reward"})
_CODE = re.compile(r"\(code: ([A-Z_]+)\)\s*$")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
#: A tool call as chat models write one (Hermes/Qwen): the JSON inside the tags.
_TOOL_CALL = re.compile(r"^<tool_call>\s*(.*?)\s*</tool_call>$", re.DOTALL)


class _BadReply(Exception):
    """The server's frame is not OpenEnv's protocol (not JSON, the wrong type, fields of the wrong kind)."""


class _SessionLost(Exception):
    """The socket that carried the episode closed; OpenEnv's client would reconnect to a new, empty session."""


#: The one message the client adds: a ``state`` request sent right behind each reset and step, whose answer
#: must be the next frame after the reset's or step's own (OpenEnv's protocol carries no request ids).
_BARRIER = json.dumps({"type": "state"})


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 parses as inf
        raise ValueError(f"the number {text[:40]} is out of the float range")
    return value


def parse_frame(raw: str | bytes) -> Any:
    """``raw`` as JSON, strictly: NaN, Infinity, floats past the float range are not JSON numbers.

    Raises:
        _BadReply: it is not JSON, or holds such a number (or an integer too long to read, or nests too deep).
    """
    try:
        return json.loads(raw, parse_constant=_no_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise _BadReply(f"the frame is not JSON ({exc.msg} at char {exc.pos})") from None
    except ValueError as exc:  # NaN/Infinity, 1e400, an integer of more than 4300 digits
        raise _BadReply(f"the frame is not JSON ({str(exc)[:120]})") from None
    except RecursionError:
        raise _BadReply("the frame nests too deep to read") from None


def reward_value(reward: Any) -> float:
    """The reward of an observation frame as a finite float (``None`` is 0).

    Raises:
        _BadReply: it is not a number (a boolean, a string), or not a finite one (an integer past the float range).
    """
    if reward is None:
        return 0.0
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise _BadReply(f"'reward' is {reward!r:.60}, not a number or null")
    try:
        value = float(reward)
    except OverflowError:  # 10**400: an int Python reads, no float holds
        value = math.inf
    if not math.isfinite(value):
        raise _BadReply(f"'reward' is {str(reward)[:40]}, not a finite number")
    return value


def check_reply(kind: str, response: Any) -> dict[str, Any]:
    """``response`` if it is a well-formed OpenEnv answer to a ``kind`` message (``reset``/``step``/``state``).

    Raises:
        _BadReply: it is not: says what is wrong.
    """
    if not isinstance(response, dict):
        raise _BadReply(f"the frame is JSON {type(response).__name__}, not an object")
    if response.get("type") == "error":  # raised as ServerErrorFrame with its code
        data = response.get("data", {})
        if not isinstance(data, dict):
            raise _BadReply(f"the error frame's 'data' is {type(data).__name__}, not an object")
        code = data.get("code", "UNKNOWN")
        if not isinstance(code, str) or not re.fullmatch(r"[A-Z_]{1,64}", code):
            raise _BadReply(f"the error frame's 'code' is {code!r:.60}, not an OpenEnv error code")
        return response
    expected = "state" if kind == "state" else "observation"
    if response.get("type") != expected:
        raise _BadReply(f"a {kind!r} was answered with a frame of type {response.get('type')!r:.60}, not {expected!r}")
    data = response.get("data")
    if not isinstance(data, dict):
        raise _BadReply(f"the {expected} frame's 'data' is {type(data).__name__}, not an object")
    if expected == "observation":
        done, observation = data.get("done", False), data.get("observation", {})
        if not isinstance(observation, dict):
            raise _BadReply(f"'observation' is {type(observation).__name__}, not an object")
        reward_value(data.get("reward"))
        if not isinstance(done, bool):
            raise _BadReply(f"'done' is {done!r:.60}, not a boolean")
        metadata = data.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise _BadReply(f"'metadata' is {type(metadata).__name__}, not an object")
    return response


def _check_barrier(kind: str, frame: Any) -> None:
    """The frame after a ``kind``'s answer must answer the barrier: a state (or an error, e.g. a state that raised).

    Raises:
        _BadReply: another frame came first: the server sent an extra or duplicated frame, or left one out.
    """
    if isinstance(frame, dict) and frame.get("type") == "state" and isinstance(frame.get("data"), dict):
        return
    if isinstance(frame, dict) and frame.get("type") == "error":
        check_reply("state", frame)
        return
    what = frame.get("type") if isinstance(frame, dict) else type(frame).__name__
    raise _BadReply(
        f"the frame after the {kind}'s answer is {what!r:.60}, not the answer to the 'state' request sent right "
        f"behind the {kind}: the server sent an extra or duplicated frame or left one out, so the answers no "
        "longer match the requests"
    )


class ServerErrorFrame(Exception):
    """The server answered with an OpenEnv ``error`` frame.

    Attributes:
        code: OpenEnv's error code (``CAPACITY_REACHED``, ``EXECUTION_ERROR``, ...).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"Server error: {message[:2000]} (code: {code})")
        self.code = code


#: The largest frame the client reads (OpenEnv's own client allows 100 MB).
MAX_FRAME_BYTES = 100 * 2**20


class WireSession:
    """One OpenEnv WebSocket session, spoken with gem's own code: every frame checked, each answer matched.

    The socket opens at the first reset; an episode never moves to a new socket (a step on a socket that
    closed is :class:`_SessionLost`, where OpenEnv's client would reconnect to a new, empty session). Every
    wait is bounded: the connection by ``connect_timeout_s``, each answer by ``message_timeout_s`` (a socket
    whose answer came late is never read again), the close handshake by ``close_timeout_s``.

    Args:
        base_url: The server, ``http(s)://`` or ``ws(s)://``.
        message_timeout_s: How long one answer may take.
        connect_timeout_s: How long opening the socket may take.
    """

    def __init__(self, base_url: str, message_timeout_s: float, connect_timeout_s: float = 10.0) -> None:
        scheme, rest = base_url.split("://", 1) if "://" in base_url else ("http", base_url)
        self.ws_url = {"https": "wss", "wss": "wss"}.get(scheme, "ws") + "://" + rest.rstrip("/") + "/ws"
        self.message_timeout_s = message_timeout_s
        self.connect_timeout_s = min(connect_timeout_s, message_timeout_s)
        self.close_timeout_s = min(5.0, message_timeout_s)
        self.socket: Any = None
        #: The socket of the current episode (set by reset); a step goes out on it or not at all.
        self.episode_socket: Any = None

    def _connect(self) -> Any:
        from urllib.parse import urlsplit

        from websockets.sync.client import connect

        host = urlsplit(self.ws_url).hostname or ""
        local = host in ("localhost", "127.0.0.1", "::1")
        try:
            opened = connect(
                self.ws_url,
                open_timeout=self.connect_timeout_s,
                close_timeout=self.close_timeout_s,
                max_size=MAX_FRAME_BYTES,
                compression=None,
                # No keepalive pings: websockets draws their payload from the global `random` (an env must
                # leave it alone; gem check caught it on a chess game past 20 s), and every answer here is
                # bounded by message_timeout_s anyway.
                ping_interval=None,
                **({"proxy": None} if local else {}),  # a proxy from the environment never carries loopback
            )
            # Entered as websockets >= 17.1 asks (the connection is its own context manager; close() ends it).
            return opened.__enter__()
        except TimeoutError:
            raise TimeoutError(f"connecting took longer than {self.connect_timeout_s:g}s") from None

    def _receive(self, socket: Any) -> Any:
        try:
            raw = socket.recv(timeout=self.message_timeout_s)
        except TimeoutError:
            # The late answer would be read as the next request's: this socket is never read again.
            self._abandon()
            raise
        return parse_frame(raw)

    def _abandon(self) -> None:
        socket, self.socket = self.socket, None
        if socket is not None:
            with contextlib.suppress(Exception):
                socket.close()

    def exchange(self, kind: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send a ``kind`` message (``reset``/``step``/``state``) and return its checked answer frame's ``data``.

        Raises:
            _BadReply: the server broke the protocol (the socket is dropped).
            _SessionLost: the episode's socket closed (a step never reaches a new session).
            ServerErrorFrame: the server answered with an error frame.
            TimeoutError: no answer within ``message_timeout_s``.
            OSError: the server cannot be reached.
        """
        from websockets.exceptions import ConnectionClosed
        from websockets.protocol import State

        pinned = self.episode_socket
        if kind == "step" and (pinned is None or self.socket is not pinned or pinned.state is not State.OPEN):
            raise _SessionLost(f"the connection that carried this episode closed{_close_reason(pinned)}")
        if self.socket is not None and self.socket.state is not State.OPEN:
            self._abandon()
        if self.socket is None:
            self.socket = self._connect()
        socket = self.socket
        message = {"type": kind} if data is None else {"type": kind, "data": data}
        barrier = kind in ("reset", "step")
        try:
            with contextlib.suppress(ConnectionClosed):  # a refused session sends its error frame, then closes
                socket.send(json.dumps(message, ensure_ascii=True))
                if barrier:
                    socket.send(_BARRIER)
            response = check_reply(kind, self._receive(socket))
            error = response.get("type") == "error"
            if barrier:
                try:
                    _check_barrier(kind, self._receive(socket))
                except ConnectionClosed:
                    if not error:  # only a refusal (error frame) may close the socket before the barrier's answer
                        raise
        except _BadReply:
            self._abandon()
            raise
        except ConnectionClosed as exc:
            self._abandon()
            raise _SessionLost(f"the connection closed before the answer arrived{_close_reason(socket)}") from exc
        if kind == "reset":
            self.episode_socket = socket
        if error:
            frame = response.get("data", {})
            raise ServerErrorFrame(str(frame.get("code", "UNKNOWN")), str(frame.get("message", "Unknown error")))
        payload: dict[str, Any] = response["data"]
        return payload

    def close(self) -> None:
        """Say ``close`` to the server (its session is freed) and close the socket, within ``close_timeout_s``."""
        socket, self.socket, self.episode_socket = self.socket, None, None
        if socket is not None:
            with contextlib.suppress(Exception):
                socket.send(json.dumps({"type": "close"}))
            with contextlib.suppress(Exception):
                socket.close()


def _close_reason(socket: Any) -> str:
    """`` (closed by the server: CODE REASON)`` when the server closed ``socket`` saying why, else nothing."""
    code = getattr(socket, "close_code", None)
    if not isinstance(code, int):
        return ""
    reason = getattr(socket, "close_reason", "") or "no reason given"
    return f" (closed with code {code}: {reason})"


def error_code(exc: BaseException) -> str | None:
    """OpenEnv's error code in a client error (``Server error: ... (code: X)``), if any."""
    match = _CODE.search(str(exc))
    return match.group(1) if match else None


class ActionFormat:
    """How the model's text becomes an OpenEnv action, from the action's JSON schema.

    An action with one field that takes a string (``str``, an optional ``str``, a string enum) gets
    the model's raw text; any other action is a JSON object the model writes. Either way the action
    is checked against the schema (``$defs`` references included) before it is sent.

    Args:
        schema: The ``action`` entry of the server's ``/schema``.
    """

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        properties = schema.get("properties") or {}
        # A JSON schema may be a boolean (true: anything); as a field it reads as {} here, the check keeps its meaning
        self.fields = {k: v if isinstance(v, dict) else {} for k, v in properties.items() if k not in _PROTOCOL_FIELDS}
        only = next(iter(self.fields.values())) if len(self.fields) == 1 else None
        #: The one text field that receives the raw reply, or ``None`` for JSON actions.
        self.text_field: str | None = next(iter(self.fields)) if only and "string" in self._kinds(only) else None
        kind = self._resolve(self.fields.get("type", {}))
        #: An MCP env's action (OpenEnv's ``CallToolAction``): ``{"type": "list_tools"}`` is an action too.
        self.mcp = "tool_name" in self.fields and "call_tool" in (kind.get("const"), kind.get("default"))

    def _resolve(self, field: dict[str, Any]) -> dict[str, Any]:
        """``field`` with its ``$ref`` (to the schema's ``$defs``) followed."""
        for _ in range(32):
            if not isinstance(field, dict):
                return {}  # a self-referencing schema stops here, unresolved
            ref = field.get("$ref")
            if not isinstance(ref, str):
                break
            defs = self.schema.get("$defs")
            target = defs.get(ref.rsplit("/", 1)[-1], {}) if isinstance(defs, dict) else {}
            field = {**target, **{k: v for k, v in field.items() if k != "$ref"}}
        return field

    def _kinds(self, field: dict[str, Any]) -> list[str]:
        """The JSON types ``field`` accepts (``anyOf``/``oneOf`` options included)."""
        field = self._resolve(field)
        options = field.get("anyOf") or field.get("oneOf")
        if options:
            return [kind for option in options for kind in self._kinds(option)]
        kind = field.get("type")
        return list(kind) if isinstance(kind, list) else [kind] if isinstance(kind, str) else ["any"]

    def _describe_field(self, field: dict[str, Any]) -> str:
        field = self._resolve(field)
        if "enum" in field:
            return "one of " + "|".join(v if isinstance(v, str) else json.dumps(v) for v in field["enum"])
        if "const" in field:
            return json.dumps(field["const"])
        return "|".join(dict.fromkeys(self._kinds(field)))

    def describe(self) -> str:
        """The schema as the model must write it, for messages."""
        required = [r for r in self.schema.get("required", []) if r not in _PROTOCOL_FIELDS]
        if self.text_field is not None:
            field = self._describe_field(self.fields[self.text_field])
            return f"the reply's raw text, sent as the field {self.text_field!r} ({field})"
        if self.mcp:
            return MCP_USAGE
        fields = {k: self._describe_field(v) for k, v in self.fields.items()}
        return f"a JSON object with fields {json.dumps(fields)} (required: {', '.join(required) or 'none'})"

    def _check(self, value: dict[str, Any]) -> dict[str, Any]:
        import jsonschema

        validator = jsonschema.Draft202012Validator(self.schema)
        problem = next(iter(sorted(validator.iter_errors(value), key=lambda e: list(e.path))), None)
        if problem is not None:
            where = "/".join(map(str, problem.path)) or "the object"
            raise ActionSchemaError(f"{where}: {problem.message}; this env's action is {self.describe()}")
        return value

    def build(self, text: str) -> dict[str, Any]:
        """The action dict for ``text``.

        Raises:
            ActionSchemaError: ``text`` does not fit the schema (not JSON, not an object, a value of the
                wrong kind, outside an enum or bound); names the schema.
        """
        if self.text_field is not None:
            return self._check({self.text_field: text})
        body = text.strip()
        fenced = _FENCE.match(body) or (_TOOL_CALL.match(body) if self.mcp else None)
        try:
            value = json.loads(fenced.group(1) if fenced else body, parse_constant=_no_constant)
        except (json.JSONDecodeError, ValueError) as exc:
            why = f"{exc.msg} at char {exc.pos}" if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise ActionSchemaError(f"the reply is not JSON ({why}); this env's action is {self.describe()}") from None
        except RecursionError:
            raise ActionSchemaError(f"the reply nests too deep; this env's action is {self.describe()}") from None
        if not isinstance(value, dict):
            raise ActionSchemaError(f"the reply is JSON {type(value).__name__}; this env's action is {self.describe()}")
        if self.mcp:
            return self._mcp_action(value)
        return self._check(value)

    def _mcp_action(self, value: dict[str, Any]) -> dict[str, Any]:
        """An MCP env's action: ``list_tools``, or a tool call (``name`` is taken for ``tool_name``, as MCP says it)."""
        if value.get("type") == "list_tools":
            extra = sorted(set(value) - {"type", "metadata"})
            if extra:
                raise ActionSchemaError(f"list_tools takes no fields, got {extra}; this env's action is {MCP_USAGE}")
            return {"type": "list_tools"}
        if "name" in value and "tool_name" not in value:
            value = {("tool_name" if k == "name" else k): v for k, v in value.items()}
        return self._check({"type": "call_tool", **value})

    def example(self) -> str:
        """A reply that fits the schema (for smoke tests and ``gem check``)."""
        if self.mcp:
            return json.dumps({"type": "list_tools"})
        if self.text_field is not None:
            field = self._resolve(self.fields[self.text_field])
            for option in field.get("anyOf") or field.get("oneOf") or [field]:  # the string option, not a null default
                value = self._example_value({k: v for k, v in self._resolve(option).items() if k != "default"})
                if isinstance(value, str):
                    return value
            return "x"
        return json.dumps({k: self._example_value(v) for k, v in self.fields.items()})

    def _example_value(self, field: dict[str, Any]) -> Any:
        """A value ``field`` accepts: its const, default, first enum member, or one built from its type and bounds."""
        field = self._resolve(field)
        for key in ("const", "default"):
            if key in field:
                return field[key]
        if field.get("enum"):
            return field["enum"][0]
        options = field.get("anyOf") or field.get("oneOf")
        if options:
            return self._example_value(options[0])
        kind = self._kinds(field)[0]
        if kind in ("integer", "number"):
            low = _number(field.get("minimum"), _number(field.get("exclusiveMinimum"), -1) + 1)
            if kind == "integer":
                return math.ceil(low)
            try:
                return float(low)
            except OverflowError:  # a bound past the float range: the bound itself is the example
                return low
        if kind == "object":
            properties = field.get("properties", {})
            return {k: self._example_value(properties.get(k, {})) for k in field.get("required", [])}
        if kind == "array":  # a server's huge minItems/minLength gives a short, failing example, not a huge one
            count = min(math.ceil(_number(field.get("minItems"), 0)), _MAX_EXAMPLE)
            return [self._example_value(field.get("items", {}))] * count
        if kind == "string":
            return "x" * max(1, min(math.ceil(_number(field.get("minLength"), 1)), _MAX_EXAMPLE))
        return {"boolean": False, "null": None}.get(kind, "x")


#: How the model acts on an MCP env (OpenEnv's ``CallToolAction`` and ``ListToolsAction``).
MCP_USAGE = (
    'a JSON object calling one of the env\'s tools, {"tool_name": NAME, "arguments": {...}}, or '
    '{"type": "list_tools"} to list the tools'
)

#: The longest string or array :meth:`ActionFormat.example` builds.
_MAX_EXAMPLE = 1000


def _number(value: Any, default: int) -> Any:
    """``value`` when it is a finite number (not a boolean), else ``default``; integers stay integers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    if isinstance(value, float) and not math.isfinite(value):
        return default
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


#: The largest seed sent to a server that is not gem's (numpy's seeding takes ``[0, 2**32 - 1]``).
DEFAULT_MAX_SEED = 2**32 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")


def wire_safe(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (keys too) replaced by U+FFFD.

    UTF-8 cannot encode a lone surrogate: a server that decodes or re-encodes such text crashes or
    garbles it, and two of them in a row read back as one astral character. The model's text is sent
    as the characters it can mean.
    """
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {wire_safe(k): wire_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [wire_safe(v) for v in value]
    return value


class OpenEnvEnv(Env):
    """An OpenEnv server's env, played through one OpenEnv client session.

    Args:
        base_url: The server, e.g. ``http://127.0.0.1:8000``.
        on_bad_action: ``"observe"`` (default): a reply that does not fit the action schema is
            a format error observation naming the schema (the gem Env contract: ``step`` never
            raises for model text); ``"raise"``: :class:`~gem_core.errors.ActionSchemaError`.
        capacity_wait_s: How long to retry a server at ``CAPACITY_REACHED`` before giving up.
        message_timeout_s: How long to wait for one answer of the server.
        observation_field: Show the model this one observation field (a string as is, other values as
            JSON). Default: every field that has a value (:func:`~gem_openenv.render.render_observation`;
            an MCP env's tool result or tool list, and its tools at reset); against ``gem serve``, its
            ``text``.
        max_seed: The largest seed sent; a larger (or negative) one is folded into ``[0, max_seed]``
            by a stable hash (``info["openenv_seed"]`` says which was played). Default: ``2**32 - 1``
            (what numpy-seeded OpenEnv envs accept), unlimited for a ``gem serve`` server (gem envs take
            any seed, so the episode is the in-process one). ``None``: never folded.

    Raises:
        EnvServerUnavailable: the server cannot be reached (when the schema is read).
    """

    metadata: ClassVar[dict[str, Any]] = {"multi_turn": True}

    def __init__(
        self,
        base_url: str,
        *,
        on_bad_action: Literal["observe", "raise"] = "observe",
        capacity_wait_s: float = 60.0,
        message_timeout_s: float = 60.0,
        observation_field: str | None = None,
        max_seed: int | Literal["auto"] | None = "auto",
    ) -> None:
        if on_bad_action not in ("observe", "raise"):
            raise ConfigError(f"on_bad_action must be 'observe' or 'raise', got {on_bad_action!r}")
        for name, value in (("capacity_wait_s", capacity_wait_s), ("message_timeout_s", message_timeout_s)):
            # NaN would never pass a deadline (a backoff without end); inf waits forever on a dead server
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ConfigError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
        if message_timeout_s == 0:
            raise ConfigError("message_timeout_s must be above 0 (no answer arrives in no time)")
        self.base_url = base_url.rstrip("/")
        self.on_bad_action = on_bad_action
        self.capacity_wait_s = capacity_wait_s
        self.message_timeout_s = message_timeout_s
        schemas = self._get("/schema")
        action_schema, observation_schema = schemas.get("action"), schemas.get("observation", {})
        if not isinstance(action_schema, dict) or not isinstance(observation_schema, dict):
            raise EnvServerError(
                f"the OpenEnv server at {self.base_url} sent a /schema without 'action' and 'observation' objects "
                f"(keys: {sorted(schemas)}); is it an OpenEnv 0.10 server?",
                code="MALFORMED_REPLY",
            )
        self._check_schemas(action_schema, observation_schema)
        self.action_format = ActionFormat(action_schema)
        observed = {
            k: v
            for k, v in (observation_schema.get("properties") or {}).items()
            if k not in _PROTOCOL_FIELDS and isinstance(v, dict)
        }
        #: The observation's fields in the schema's order (how they are rendered for the model).
        self.observation_order = list(observed)
        #: Whether the server is ``gem serve`` (its observation is a gem env's: text, flags, info).
        self.gem_server = observation_schema.get("title") == "GemObservation" and {"terminated", "info"} <= set(
            observed
        )
        if observation_field is not None and not isinstance(observation_field, str):
            raise ConfigError(f"observation_field must be a field name, got {observation_field!r}")
        self.observation_field = observation_field or ("text" if self.gem_server else None)
        self._tools_text: str | None = None
        if max_seed == "auto":
            max_seed = None if self.gem_server else DEFAULT_MAX_SEED
        if max_seed is not None and (isinstance(max_seed, bool) or not isinstance(max_seed, int) or max_seed < 0):
            raise ConfigError(f"max_seed must be an integer >= 0, None or 'auto', got {max_seed!r}")
        self.max_seed: int | None = max_seed
        self._client: WireSession | None = None
        self._live = False

    def _check_schemas(self, *schemas: dict[str, Any]) -> None:
        """Both are JSON schemas of objects (so checks, messages and examples work on them)."""
        import jsonschema
        import referencing.exceptions

        for schema in schemas:
            try:
                jsonschema.Draft202012Validator.check_schema(schema)
                if not isinstance(schema.get("properties", {}), dict):
                    raise jsonschema.SchemaError("'properties' is not an object")
                list(jsonschema.Draft202012Validator(schema).iter_errors({}))  # its references resolve
            except (jsonschema.SchemaError, referencing.exceptions.Unresolvable) as exc:
                raise EnvServerError(
                    f"the OpenEnv server at {self.base_url} sent a /schema that is not a JSON schema "
                    f"({str(exc).splitlines()[0]}); is it an OpenEnv 0.10 server?",
                    code="MALFORMED_REPLY",
                ) from None

    # ------------------------------------------------------------------ transport
    def _get(self, path: str) -> dict[str, Any]:
        import httpx

        try:
            response = httpx.get(self.base_url + path, timeout=self.message_timeout_s)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise EnvServerUnavailable(
                f"cannot read {path} of the OpenEnv server at {self.base_url}: {type(exc).__name__}: {exc}; "
                "is it running (e.g. 'gem serve ID --port N' or the env's own server)?"
            ) from exc
        try:
            result = parse_frame(response.content)  # strict: no NaN/Infinity bounds in a schema
        except _BadReply as exc:
            result = exc
        if not isinstance(result, dict):
            raise EnvServerError(
                f"the OpenEnv server at {self.base_url} answered {path} with {response.text[:80]!r}, not a JSON "
                "object; is it an OpenEnv 0.10 server?",
                code="MALFORMED_REPLY",
            )
        return result

    def _session(self) -> WireSession:
        if self._client is None:
            self._client = WireSession(self.base_url, self.message_timeout_s)
        return self._client

    def _drop_session(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def _call(self, phase: str, data: dict[str, Any]) -> dict[str, Any]:
        """One reset/step exchange; protocol and transport errors become gem's typed ones."""
        try:
            return self._session().exchange(phase, data)
        except _BadReply as exc:
            self._drop_session()  # a server that broke the protocol once is not trusted with this episode
            self._live = False
            raise EnvServerError(
                f"the OpenEnv server at {self.base_url} sent a malformed answer to {phase}: {exc}; this episode is "
                "lost: check the server's version (OpenEnv 0.10 protocol) and its logs, then reset",
                code="MALFORMED_REPLY",
            ) from None
        except _SessionLost as exc:
            raise self._gone(phase, exc) from exc
        except ServerErrorFrame as exc:
            lost = phase == "step" and exc.code != "VALIDATION_ERROR"
            if lost:
                self._live = False  # the server's env failed mid-step: its state is unknown, so is this episode's
            raise EnvServerError(
                f"the OpenEnv server at {self.base_url} refused {phase}: {exc}"
                + ("; this episode is lost: reset" if lost else ""),
                code=exc.code,
            ) from exc
        except (ConnectionError, OSError, TimeoutError) as exc:
            raise self._gone(phase, exc) from exc
        except Exception as exc:
            if type(exc).__module__.startswith("websockets"):  # InvalidHandshake, InvalidURI and friends
                raise self._gone(phase, exc) from exc
            raise

    def _gone(self, phase: str, exc: BaseException) -> EnvServerUnavailable:
        self._drop_session()
        self._live = False
        if isinstance(exc, TimeoutError):
            what = f"did not answer {phase} within message_timeout_s={self.message_timeout_s:g}s"
        else:
            what = f"went away during {phase} ({type(exc).__name__}: {exc})"
        return EnvServerUnavailable(
            f"the OpenEnv server at {self.base_url} {what}; this episode is lost: check the server, then reset"
        )

    # ------------------------------------------------------------------ episode
    def wire_seed(self, seed: int) -> int:
        """The seed sent for ``seed``: as is within ``[0, max_seed]``, else folded into it by a stable hash."""
        if self.max_seed is None or 0 <= seed <= self.max_seed:
            return seed
        digest = hashlib.blake2b(str(seed).encode(), digest_size=16).digest()
        return int.from_bytes(digest, "big") % (self.max_seed + 1)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        self._live = False  # until this reset answers: a failed reset leaves no episode to step
        if options is not None and not isinstance(options, dict):
            raise ConfigError(f"reset options must be a dict of the server's reset arguments, got {options!r:.100}")
        sent = None if seed is None else self.wire_seed(seed)
        data = wire_safe({**(options or {}), **({} if sent is None else {"seed": sent})})
        deadline, delay = time.monotonic() + self.capacity_wait_s, 0.05
        while True:
            try:
                result = self._call("reset", data)
                break
            except EnvServerError as exc:
                if exc.code != "CAPACITY_REACHED":
                    raise
                self._drop_session()  # the server closes a refused socket; the next try opens a new one
                if time.monotonic() + delay > deadline:
                    more = (
                        "gem serve --max-sessions N"
                        if self.gem_server
                        else "OpenEnv's create_app(..., max_concurrent_envs=N), whose default is 1 session; many "
                        "of OpenEnv's example servers read MAX_CONCURRENT_ENVS"
                    )
                    raise EnvServerAtCapacity(
                        f"the OpenEnv server at {self.base_url} stayed at capacity for {self.capacity_wait_s:g}s "
                        f"(CAPACITY_REACHED): start it with more sessions ({more}), run fewer envs against it, "
                        "or raise capacity_wait_s"
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        self._live = True
        obs, _, _, _, info = self._unpack(result)
        if self.action_format.mcp and self.observation_field is None:  # the model learns its tools at reset
            obs = "\n\n".join(filter(None, [obs, self._tools()]))
        if sent is not None and sent != seed:
            info["openenv_seed"] = sent  # the seed the server played (folded into its range)
        return obs, info

    def step(self, action: str) -> StepReturn:
        require_text_action(self, action, "the model's reply, sent as this server's action")
        if not self._live:
            raise ResetNeeded("call reset() before step(), and again after the episode ended")
        try:
            payload = self.action_format.build(action)
        except ActionSchemaError as exc:
            if self.on_bad_action == "raise":
                raise
            return f"Invalid action: {exc}", 0.0, False, False, {"format_error": True}
        result = self._call("step", wire_safe(payload))
        step = self._unpack(result)
        if step[2] or step[3]:
            self._live = False
        return step

    def _unpack(self, result: dict[str, Any]) -> StepReturn:
        """A checked observation frame's ``data`` as gem's step tuple."""
        observation = dict(result.get("observation") or {})
        observation.pop("metadata", None)
        metadata = result.get("metadata")
        if self.observation_field is not None:
            value = observation.get(self.observation_field)
            text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=repr)
        else:
            text = render_observation(
                observation, self.observation_order, metadata if isinstance(metadata, dict) else None
            )
        done = bool(result.get("done", False))
        flags = observation.get("terminated"), observation.get("truncated")
        if all(isinstance(flag, bool) for flag in flags) and any(flags) == done:  # a gem server: its flags as is
            terminated, truncated = bool(flags[0]), bool(flags[1])
        else:  # OpenEnv's done ends the episode; only a boolean 'truncated' makes it a cut, not a terminal state
            truncated = flags[1] is True and done
            terminated = done and not truncated
        reward = reward_value(result.get("reward"))  # checked when the frame arrived
        gem_info = observation.get("info")
        if isinstance(gem_info, dict) and "terminated" in observation:  # a gem server: its info as is
            info = dict(gem_info)
        else:
            info = {"openenv_observation": observation}
            # OpenEnv has no success flag; a server that reports one (observation or metadata) is believed.
            for source in (observation, metadata if isinstance(metadata, dict) else {}):
                if isinstance(source.get("success"), bool):
                    info["success"] = source["success"]
                    break
        if metadata:
            info["openenv_metadata"] = metadata
        return text, reward, terminated, truncated, info

    def _tools(self) -> str:
        """An MCP env's tools and how to call them, read once from the server's ``POST /mcp`` ``tools/list``.

        A server whose ``/mcp`` does not answer (or not with tools) gets the way to list them instead.
        """
        if self._tools_text is None:
            import httpx

            listing = 'Tools: send {"type": "list_tools"} to list them.'
            try:
                response = httpx.post(
                    self.base_url + "/mcp",
                    json={"jsonrpc": "2.0", "method": "tools/list", "params": {}, "id": 1},
                    timeout=self.message_timeout_s,
                )
                tools = parse_frame(response.content).get("result", {}).get("tools")
                if isinstance(tools, list) and tools:
                    listing = "Tools:\n" + render_tools(tools)
            except (httpx.HTTPError, _BadReply, AttributeError):
                pass  # the listing is a courtesy; the episode does not need it
            self._tools_text = f"{listing}\nAct with {MCP_USAGE}."
        return self._tools_text

    def sample_random_action(self) -> str:
        return self.action_format.example()

    def close(self) -> None:
        self._live = False
        self._drop_session()

    def __repr__(self) -> str:
        return f"<OpenEnvEnv {self.base_url}>"
