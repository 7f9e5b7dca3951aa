"""Sessions, calls and episodes: what the gateway records for each harness, token exact.

A **session** is one episode of one harness: every chat call whose base URL carries the
session's key. Each call is rendered once:

* when its messages extend an earlier call's messages plus the reply the gateway gave it
  (the usual agent loop: the history, the assistant's answer as returned, then tool
  results or a new user message), its prompt is that call's prompt ids, the ids the model
  sampled, and the chat template's bridge for the new messages only (token in, token out:
  nothing the model generated is decoded and encoded again);
* otherwise (the harness rewrote, summarised or truncated the history, changed its tools,
  or this is the first call) the whole history is rendered with the chat template.

A call whose prompt does not extend the previous call's prompt plus completion is a
**branch point**: :attr:`CallRecord.branch` says why (``"rewritten"``: the history is no
extension of any earlier call; ``"fork"``: it extends an earlier call, not the latest;
``"tools"``: the tool list changed). :meth:`Session.episode` writes the calls as the turns of
one :class:`~gem_core.rl.types.Episode`; :func:`gem_core.rl.layouts.episode_to_segments`
makes one training sequence per consistent segment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gem_core.chat import ChatRenderer, render_ids
from gem_core.episode import Generation, TurnRequest
from gem_core.errors import GemCoreError, TemplatePrefixError, TrajectoryError
from gem_core.rl.types import Episode, Turn
from gem_gateway.errors import (
    BadRequest,
    GatewayOverloaded,
    GenerateFailed,
    GenerateTimedOut,
    SessionClosed,
    SessionLimit,
)
from gem_gateway.tool_parsers import ParsedReply, get_parser, parse_none

__all__ = [
    "CallRecord",
    "ChatRequest",
    "Gateway",
    "GatewayLimits",
    "Session",
    "StreamGenerate",
    "TokenDelta",
    "parse_chat_request",
]

#: ``await generate(request) -> Generation``: any gem generate function (token mode).
Generate = Callable[[TurnRequest], Awaitable[Generation]]


@dataclass(frozen=True)
class TokenDelta:
    """Ids a streaming engine sampled since its last delta.

    Attributes:
        token_ids: The new ids, in order.
        logprobs: Their logprobs (``None``: the engine gives none; then the call has none).
        finish_reason: ``None`` while the engine goes on; ``"stop"`` or ``"length"`` on its last delta.
        policy_version: The weights' version that sampled them, when the engine knows it.
    """

    token_ids: Sequence[int]
    logprobs: Sequence[float] | None = None
    finish_reason: str | None = None
    policy_version: int | None = None


#: ``streamer(request)``: an async iterator of :class:`TokenDelta` as the engine samples; closing
#: it early (``aclose``) must end the engine's request.
StreamGenerate = Callable[[TurnRequest], AsyncIterator[TokenDelta]]

_ROLES = frozenset({"system", "user", "assistant", "tool"})


@dataclass(frozen=True)
class GatewayLimits:
    """Bounds of one gateway; every request is bounded in time and every table in size.

    Attributes:
        max_sessions: Most sessions open at once (a new key beyond it: HTTP 429).
        max_calls_per_session: Most calls recorded in one session (beyond it: HTTP 429).
        max_concurrent_generations: Most generate calls in flight; others queue.
        request_timeout_s: Longest a call may wait for a slot and its generation together
            (HTTP 503 while queued, 504 while generating).
        default_max_tokens: Tokens a call may generate when the request names no limit.
        max_tokens_cap: Most tokens any call may generate (a larger request: HTTP 400).
        max_context_tokens: Most prompt plus generated tokens of a call (a longer one: HTTP 400).
        max_body_bytes: Largest request body (a larger one: HTTP 413).
        closed_keys_kept: How many finished session keys are remembered, to refuse late calls.
    """

    max_sessions: int = 1024
    max_calls_per_session: int = 256
    max_concurrent_generations: int = 512
    request_timeout_s: float = 300.0
    default_max_tokens: int = 512
    max_tokens_cap: int = 8192
    max_context_tokens: int = 32768
    max_body_bytes: int = 8 * 2**20
    closed_keys_kept: int = 65536

    def __post_init__(self) -> None:
        for name in ("max_sessions", "max_calls_per_session", "max_concurrent_generations", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise BadRequest(f"GatewayLimits.{name} must be at least 1, got {getattr(self, name)}")
        if not (self.request_timeout_s > 0 and math.isfinite(self.request_timeout_s)):
            raise BadRequest(f"GatewayLimits.request_timeout_s must be a positive number, got {self.request_timeout_s}")
        if not 1 <= self.default_max_tokens <= self.max_tokens_cap <= self.max_context_tokens:
            raise BadRequest(
                "GatewayLimits needs 1 <= default_max_tokens <= max_tokens_cap <= max_context_tokens, got "
                f"{self.default_max_tokens}, {self.max_tokens_cap}, {self.max_context_tokens}"
            )


@dataclass(frozen=True)
class ChatRequest:
    """A chat completion request, checked and normalised (what the gateway serves of OpenAI's API)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    max_tokens: int | None
    stream: bool
    include_usage: bool
    stop: tuple[str, ...]
    logprobs: bool
    tool_choice: Any
    model: str | None
    sampling: dict[str, Any]


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise BadRequest(
                    f"{where}.content[{i}] is not a text part ({{'type': 'text', 'text': ...}}); the gateway serves "
                    "text chat only",
                    param=f"{where}.content",
                )
            parts.append(part["text"])
        return "".join(parts)
    raise BadRequest(f"{where}.content must be a string, a list of text parts or null", param=f"{where}.content")


def _arguments(raw: Any, where: str) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, str):
        try:
            value = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise BadRequest(f"{where}.function.arguments is not JSON ({exc})", param=where) from None
        if isinstance(value, dict):
            return value
    raise BadRequest(f"{where}.function.arguments must be a JSON object (as a string)", param=where)


def _message(raw: Any, index: int) -> dict[str, Any]:
    where = f"messages[{index}]"
    if not isinstance(raw, Mapping):
        raise BadRequest(f"{where} must be an object with 'role' and 'content'", param=where)
    role = raw.get("role")
    if role == "developer":  # OpenAI's newer name for the system role
        role = "system"
    if role not in _ROLES:
        raise BadRequest(f"{where}.role must be one of {sorted(_ROLES)} (or 'developer'), got {role!r}", param=where)
    message: dict[str, Any] = {"role": role, "content": _text(raw.get("content"), where)}
    if role == "assistant" and raw.get("tool_calls"):
        calls = raw["tool_calls"]
        if not isinstance(calls, list):
            raise BadRequest(f"{where}.tool_calls must be a list", param=where)
        normalised = []
        for j, call in enumerate(calls):
            at = f"{where}.tool_calls[{j}]"
            function = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
                raise BadRequest(f"{at} needs function.name and function.arguments", param=at)
            normalised.append(
                {
                    "id": str(call.get("id", "")),
                    "type": "function",
                    "function": {"name": function["name"], "arguments": _arguments(function.get("arguments"), at)},
                }
            )
        message["tool_calls"] = normalised
    if role == "tool":
        message["tool_call_id"] = str(raw.get("tool_call_id", ""))
        if isinstance(raw.get("name"), str):
            message["name"] = raw["name"]
    return message


def _positive_int(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadRequest(f"{name} must be a positive integer, got {value!r}", param=name)
    return value


def parse_chat_request(body: Any) -> ChatRequest:
    """Check a ``/chat/completions`` body and normalise its messages.

    Raises:
        BadRequest: what is wrong and how to fix it (a missing or empty ``messages``, an unknown
            role, ``n`` other than 1, a non-text content part, a last message from the assistant).
    """
    if not isinstance(body, Mapping):
        raise BadRequest("the request body must be a JSON object")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise BadRequest("messages must be a non-empty list of chat messages", param="messages")
    messages = [_message(m, i) for i, m in enumerate(raw_messages)]
    if messages[-1]["role"] == "assistant":
        raise BadRequest(
            "the last message is the assistant's: the gateway does not continue a prefilled answer; end with a "
            "user or tool message",
            param="messages",
        )
    if body.get("n", 1) != 1:
        raise BadRequest(f"n must be 1 (one episode, one sample per call), got {body.get('n')!r}", param="n")
    tools = body.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, Mapping) for t in tools)):
        raise BadRequest("tools must be a list of tool objects", param="tools")
    stop = body.get("stop")
    stops: tuple[str, ...] = ()
    if isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) and s for s in stop) and len(stop) <= 16:
        stops = tuple(stop)
    elif stop is not None:
        raise BadRequest("stop must be a string or a list of at most 16 non-empty strings", param="stop")
    options = body.get("stream_options") or {}
    max_tokens = _positive_int(body, "max_completion_tokens") or _positive_int(body, "max_tokens")
    return ChatRequest(
        messages=messages,
        tools=[dict(t) for t in tools] if tools else None,
        max_tokens=max_tokens,
        stream=bool(body.get("stream", False)),
        include_usage=bool(isinstance(options, Mapping) and options.get("include_usage")),
        stop=stops,
        logprobs=bool(body.get("logprobs", False)),
        tool_choice=body.get("tool_choice"),
        model=body.get("model") if isinstance(body.get("model"), str) else None,
        sampling={k: body[k] for k in ("temperature", "top_p", "seed", "presence_penalty") if k in body},
    )


async def _bounded(awaitable: Awaitable[Generation], seconds: float) -> Generation:
    """``awaitable`` within ``seconds`` (``asyncio.TimeoutError`` past it); in this task where Python allows it."""
    if sys.version_info >= (3, 11):  # asyncio.timeout runs it in this task: no extra task per call
        async with asyncio.timeout(seconds):
            return await awaitable
    return await asyncio.wait_for(awaitable, seconds)


def _comparable(message: Mapping[str, Any]) -> tuple[Any, ...]:
    """What must match for a message to count as the same one (tool-call ids and tool names are the harness's)."""
    calls = tuple(
        (c["function"]["name"], json.dumps(c["function"]["arguments"], sort_keys=True))
        for c in message.get("tool_calls") or ()
    )
    return (message["role"], message["content"], calls)


def _for_template(message: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(message)
    if not out.get("tool_calls"):
        out.pop("tool_calls", None)
    return out


@dataclass
class CallRecord:
    """One chat call as the engine saw it and answered it.

    Attributes:
        index: Position in the session (arrival order).
        messages: The request's messages, normalised.
        tools: The request's tools (``None``: none).
        prompt_ids: The exact ids the generate function got.
        completion_ids: The ids it sampled (cut after a ``stop`` string when the request had one).
        logprobs: Their logprobs, when the generate function gave them.
        finish_reason: ``"stop"``, ``"length"`` or ``"tool_calls"`` (as the API answered).
        policy_version: The weights' version that sampled the call.
        text: The decoded completion.
        reply: The assistant message returned (normalised: content and tool calls).
        parent: The call whose prompt plus completion this prompt extends (``None``: rendered whole).
        branch: Why this call starts a new segment (``"rewritten"``, ``"fork"``, ``"tools"``), else ``None``.
        sampling: Sampling fields of the request (recorded; the generate function's own settings apply).
        seconds: Time in the generate function.
    """

    index: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str
    policy_version: int
    text: str
    reply: dict[str, Any]
    parent: int | None
    branch: str | None
    sampling: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    #: The messages then the reply as compared with later histories (computed once, not per later call).
    comparables: list[tuple[Any, ...]] = field(default_factory=list, repr=False)


class Session:
    """The calls of one harness episode (one session key)."""

    def __init__(
        self,
        key: str,
        ordinal: int,
        *,
        start_state_id: str | None,
        env_id: str | None,
        generate: Generate | None = None,
        stream: StreamGenerate | None = None,
    ) -> None:
        self.key = key
        #: This session's own generate function (a trainer's per-episode client), else the gateway's.
        self.generate = generate
        #: This session's own streaming engine, else the gateway's.
        self.stream = stream
        self.ordinal = ordinal
        self.start_state_id = start_state_id or f"gateway/{key}"
        self.env_id = env_id
        self.calls: list[CallRecord] = []
        self.reserved = 0
        self.failed: list[dict[str, Any]] = []
        self.created = time.time()

    @property
    def branch_points(self) -> list[int]:
        """Indices of the calls that start a new segment (the first call is not one)."""
        return [c.index for c in self.calls if c.branch is not None]

    def episode(
        self,
        reward: float = 0.0,
        *,
        rewards: Sequence[float] | None = None,
        truncated: bool = False,
        info: Mapping[str, Any] | None = None,
        actions: Sequence[str] | None = None,
    ) -> Episode:
        """The calls as one episode: a turn per call in order, ``reward`` on the last.

        Args:
            reward: The episode's reward, on the last turn.
            rewards: One reward per call instead (a trainer that knows per-step rewards, e.g. a
                gem env stepped once per call).
            truncated: The episode was cut (a turn budget, a timeout), not finished: the last
                turn is ``truncated`` instead of ``terminated``.
            info: Kept in the last turn's ``info``.
            actions: What the harness's env got for each call (``Turn.action``), when that is not
                the reply's text (e.g. a harness applying GEM's rule for cut replies); default the text.

        Raises:
            TrajectoryError: the session has no call yet (or a reward is not finite).
            BadRequest: ``rewards`` or ``actions`` do not hold one entry per call.
        """
        calls = sorted(self.calls, key=lambda c: c.index)
        if rewards is not None and len(rewards) != len(calls):
            raise BadRequest(f"session {self.key!r} made {len(calls)} calls but got {len(rewards)} rewards")
        if actions is not None and (len(actions) != len(calls) or not all(isinstance(a, str) for a in actions)):
            raise BadRequest(f"session {self.key!r} made {len(calls)} calls but got {len(actions)} actions (strings)")
        turns = []
        for position, call in enumerate(calls):
            last = position == len(calls) - 1
            new = (
                call.messages
                if call.parent is None
                else call.messages[len(calls_by(calls, call.parent).messages) + 1 :]
            )
            turns.append(
                Turn(
                    observation="\n".join(m["content"] for m in new if m["role"] != "assistant"),
                    action=call.text if actions is None else actions[position],
                    reward=rewards[position] if rewards is not None else reward if last else 0.0,
                    terminated=last and not truncated,
                    truncated=last and truncated,
                    info={
                        "call": call.index,
                        "parent": call.parent,
                        "branch": call.branch,
                        "finish_reason": call.finish_reason,
                        "tool_calls": call.reply.get("tool_calls") or [],
                        **(dict(info or {}) if last else {}),
                    },
                    prompt_token_ids=list(call.prompt_ids),
                    action_token_ids=list(call.completion_ids),
                    action_logprobs=None if call.logprobs is None else list(call.logprobs),
                    stop_reason="length" if call.finish_reason == "length" else "stop",
                    policy_versions=[call.policy_version] * len(call.completion_ids),
                )
            )
        if not turns:
            raise TrajectoryError(f"session {self.key!r} has no calls: nothing to make an episode of")
        return Episode(
            turns,
            start_state_id=self.start_state_id,
            episode_id=self.key,
            env_id=self.env_id,
            metadata={
                "source": "gem-gateway",
                "branch_points": self.branch_points,
                "failed_calls": list(self.failed),
            },
        )


def calls_by(calls: Sequence[CallRecord], index: int) -> CallRecord:
    """The call with ``index`` in ``calls``."""
    for call in calls:
        if call.index == index:
            return call
    raise KeyError(index)


@dataclass(frozen=True)
class _Pending:
    """A call accepted and rendered, before its generation."""

    index: int
    prompt: list[int]
    parent: int | None
    branch: str | None
    max_tokens: int
    version: int
    request: TurnRequest


async def _next_within(chunks: AsyncIterator[TokenDelta], seconds: float) -> TokenDelta:
    """The engine's next delta within ``seconds`` (``asyncio.TimeoutError`` past it)."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await chunks.__anext__()
    return await asyncio.wait_for(chunks.__anext__(), seconds)


class Gateway:
    """Sessions and their calls in front of one generate function (token in, token out).

    Args:
        generate: ``await generate(TurnRequest) -> Generation`` with ``token_ids`` (any gem generate
            function: :class:`gem_core.eval.backends.HFBackend`'s, vLLM's, a trainer's rollout server's).
        tokenizer: The model's tokenizer, with its chat template.
        model_name: The name ``/v1/models`` lists and answers carry.
        tool_parser: The model family's tool-call format (:data:`gem_gateway.tool_parsers.PARSERS`);
            ``"auto"`` reads it off the chat template (:func:`gem_gateway.tool_parsers.family_of`).
        limits: Bounds (:class:`GatewayLimits`).
        chat_template_kwargs: Extra ``apply_chat_template`` arguments.
        stop_token_ids: Ids that end a turn (default: the tokenizer's eos).

    Raises:
        TemplatePrefixError: the chat template cannot be bridged turn by turn (the start-up probe).
        ConfigError: an unknown tool parser.
    """

    def __init__(
        self,
        generate: Generate,
        tokenizer: Any,
        *,
        model_name: str = "gem",
        tool_parser: str = "hermes",
        limits: GatewayLimits | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        stream_generate: StreamGenerate | None = None,
    ) -> None:
        self.generate = generate
        #: Streams replies token by token for ``stream: true`` calls (else they come whole at the end).
        self.stream_generate = stream_generate
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.parse_tools = get_parser(tool_parser, tokenizer)
        self.limits = limits or GatewayLimits()
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.renderer = ChatRenderer(tokenizer, self.chat_template_kwargs)
        self.vocab_size = len(tokenizer)
        #: The weights' version now; a trainer bumps it after each update. Calls record it.
        self.policy_version = 0
        self.sessions: dict[str, Session] = {}
        self._closed: OrderedDict[str, None] = OrderedDict()
        self._ordinal = 0
        self._slots: asyncio.Semaphore | None = None

    # ------------------------------------------------------------------ sessions

    def open_session(
        self,
        key: str,
        *,
        start_state_id: str | None = None,
        env_id: str | None = None,
        generate: Generate | None = None,
        stream: StreamGenerate | None = None,
    ) -> Session:
        """Open ``key`` ahead of its first call (to name its start state for GRPO groups).

        ``generate`` answers this session's calls instead of the gateway's own function (a
        trainer's rollout client with the episode's sampling settings and sticky request id);
        ``stream`` its streaming calls (with a session ``generate`` and no ``stream``, streaming
        calls are answered whole by ``generate``: the gateway's streamer is not this session's engine).

        Raises:
            BadRequest: ``key`` is empty or too long, or already open.
            SessionClosed: ``key`` was finished (keys are single-use: one key, one episode).
            SessionLimit: ``max_sessions`` are open.
        """
        if not key or len(key) > 200:
            raise BadRequest(f"a session key must be 1-200 characters, got {len(key)}")
        if key in self.sessions:
            raise BadRequest(f"session {key!r} is already open")
        if key in self._closed:
            raise SessionClosed(f"session {key!r} was finished; use a new key for a new episode")
        if len(self.sessions) >= self.limits.max_sessions:
            raise SessionLimit(
                f"{len(self.sessions)} sessions are open (max_sessions={self.limits.max_sessions}); finish or "
                "drop sessions, or raise the limit"
            )
        session = Session(
            key, self._ordinal, start_state_id=start_state_id, env_id=env_id, generate=generate, stream=stream
        )
        self._ordinal += 1
        self.sessions[key] = session
        return session

    def session(self, key: str) -> Session:
        """The open session ``key``, opened on its first call."""
        found = self.sessions.get(key)
        return found if found is not None else self.open_session(key)

    def finish(
        self,
        key: str,
        reward: float | None = None,
        *,
        verifier: Callable[[Episode], float] | None = None,
        rewards: Sequence[float] | None = None,
        truncated: bool = False,
        info: Mapping[str, Any] | None = None,
        actions: Sequence[str] | None = None,
    ) -> Episode:
        """End session ``key``'s episode; the key is closed.

        Its reward is ``reward``, ``verifier(episode)`` or per call ``rewards`` (exactly one of
        them); see :meth:`Session.episode`. Only the trainer calls this (in process, or through
        the admin route with its token): a harness cannot set its own reward.

        Raises:
            NotFound: no open session ``key``.
            BadRequest: not exactly one of ``reward``, ``verifier`` and ``rewards``.
        """
        from gem_gateway.errors import NotFound

        if sum(x is not None for x in (reward, verifier, rewards)) != 1:
            raise BadRequest("give finish() a reward, a verifier or per-call rewards, exactly one")
        session = self.sessions.get(key)
        if session is None:
            raise NotFound(f"no open session {key!r}")
        if verifier is not None:
            reward = float(verifier(session.episode(0.0, truncated=truncated, actions=actions)))
        episode = session.episode(
            float(reward or 0.0), rewards=rewards, truncated=truncated, info=info, actions=actions
        )
        self.drop(key)
        return episode

    def drop(self, key: str) -> None:
        """Forget session ``key`` (its later calls are refused)."""
        self.sessions.pop(key, None)
        self._closed[key] = None
        while len(self._closed) > self.limits.closed_keys_kept:
            self._closed.popitem(last=False)

    # ------------------------------------------------------------------ calls

    def _prompt(
        self, session: Session, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> tuple[list[int], int | None, str | None]:
        """The call's prompt ids, the call it extends and, when it is a branch point, why."""
        wanted = [_comparable(m) for m in messages]
        latest = max(session.calls, key=lambda c: c.index) if session.calls else None
        tools_changed = False
        for call in sorted(session.calls, key=lambda c: c.index, reverse=True):
            size = len(call.messages)
            # the call's history plus its reply, as one list compare (its comparables are cached)
            if len(wanted) <= size + 1 or wanted[: size + 1] != call.comparables:
                continue
            if call.tools != tools:
                tools_changed = True
                continue
            new = [_for_template(m) for m in messages[size + 1 :]]
            try:
                bridge = self.renderer.bridge_ids(new, call.completion_ids)
            except TemplatePrefixError as exc:
                raise BadRequest(f"the chat template cannot render these new messages: {exc}") from None
            prompt = [*call.prompt_ids, *call.completion_ids, *bridge]
            return prompt, call.index, None if call is latest else "fork"
        kwargs = dict(self.chat_template_kwargs)
        if tools:
            kwargs["tools"] = tools
        try:
            prompt = render_ids(
                self.tokenizer,
                [_for_template(m) for m in messages],
                add_generation_prompt=True,
                chat_template_kwargs=kwargs,
            )
        except Exception as exc:  # jinja's own errors for what a template refuses
            raise BadRequest(
                f"the model's chat template cannot render this request: {type(exc).__name__}: {exc}"
            ) from None
        if latest is None:
            return prompt, None, None
        head = [*latest.prompt_ids, *latest.completion_ids]
        if prompt[: len(head)] == head:  # a whole render that still extends the latest call
            return prompt, latest.index, None
        return prompt, None, "tools" if tools_changed else "rewritten"

    def _max_tokens(self, request: ChatRequest, prompt: list[int]) -> int:
        limits = self.limits
        wanted = request.max_tokens or limits.default_max_tokens
        if wanted > limits.max_tokens_cap:
            raise BadRequest(
                f"max_tokens {wanted} is above the gateway's cap {limits.max_tokens_cap}", param="max_tokens"
            )
        room = limits.max_context_tokens - len(prompt)
        if room < 1:
            raise BadRequest(
                f"the prompt has {len(prompt)} tokens; the gateway's context holds {limits.max_context_tokens} "
                "(context_length_exceeded): shorten the history",
                param="messages",
            )
        return min(wanted, room)

    def _begin(self, key: str, request: ChatRequest) -> tuple[Session, _Pending]:
        """Check the call against its session and limits, render its prompt and reserve its index."""
        if key in self._closed:
            raise SessionClosed(f"session {key!r} was finished; its episode is closed (use a new session key)")
        session = self.session(key)
        if len(session.calls) + session.reserved >= self.limits.max_calls_per_session:
            raise SessionLimit(
                f"session {key!r} has made {self.limits.max_calls_per_session} calls (max_calls_per_session)"
            )
        prompt, parent, branch = self._prompt(session, request.messages, request.tools)
        max_tokens = self._max_tokens(request, prompt)
        index = len(session.calls) + session.reserved
        session.reserved += 1
        turn_request = TurnRequest(
            episode_index=session.ordinal,
            turn=index,
            prompt_ids=list(prompt),
            messages=request.messages,
            max_tokens=max_tokens,
            env_id=session.env_id,
            request_id=f"{key}/call{index}",
        )
        return session, _Pending(index, prompt, parent, branch, max_tokens, self.policy_version, turn_request)

    def _record(
        self,
        key: str,
        session: Session,
        request: ChatRequest,
        pending: _Pending,
        generation: Generation,
        read: tuple[list[int], list[float] | None, str, str],
        seconds: float,
    ) -> CallRecord:
        """The call as answered (tool calls parsed), kept in its session unless it was finished meanwhile."""
        ids, logprobs, text, finish = read
        index = pending.index
        parsed: ParsedReply = self.parse_tools(text) if request.tool_choice != "none" else ParsedReply(text, ())
        reply: dict[str, Any] = {"role": "assistant", "content": parsed.content}
        if parsed.tool_calls:
            reply["tool_calls"] = [
                {
                    "id": f"call_{index}_{j}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for j, call in enumerate(parsed.tool_calls)
            ]
            if finish == "stop":
                finish = "tool_calls"
        record = CallRecord(
            index=index,
            messages=request.messages,
            tools=request.tools,
            prompt_ids=pending.prompt,
            completion_ids=ids,
            logprobs=logprobs,
            finish_reason=finish,
            policy_version=generation.policy_version if generation.policy_version is not None else pending.version,
            text=text,
            reply=reply,
            parent=pending.parent,
            branch=pending.branch,
            sampling=request.sampling,
            seconds=seconds,
            comparables=[*(_comparable(m) for m in request.messages), _comparable(reply)],
        )
        if key in self.sessions:  # finished while generating: the answer goes back, the episode is closed
            session.calls.append(record)
        return record

    async def complete(self, key: str, request: ChatRequest) -> CallRecord:
        """Answer one chat call of session ``key`` and record it.

        Raises:
            GatewayError: a typed refusal (closed session, limits, timeouts, a failed generation).
        """
        session, pending = self._begin(key, request)
        try:
            started = time.perf_counter()
            generation = await self._generate(pending.request, session.generate or self.generate)
            seconds = time.perf_counter() - started
            read = self._read(generation, pending.max_tokens, request.stop)
        except GemCoreError as exc:
            session.failed.append({"call": pending.index, "error": type(exc).__name__, "message": str(exc)[:500]})
            raise
        finally:
            session.reserved -= 1
        return self._record(key, session, request, pending, generation, read, seconds)

    def can_stream(self, key: str) -> bool:
        """Whether calls of ``key`` are answered token by token (a streaming engine serves them)."""
        session = self.sessions.get(key)
        if session is not None and session.generate is not None:
            return session.stream is not None
        return (session is not None and session.stream is not None) or self.stream_generate is not None

    async def complete_stream(self, key: str, request: ChatRequest) -> AsyncIterator[str | CallRecord]:
        """Answer one chat call of ``key`` as the engine streams it: text deltas, then the :class:`CallRecord`.

        The deltas joined are the record's text (the reply after the request's stop strings and
        the tool parser). Text is held back while it may still be the start of a stop string,
        and entirely when the reply may hold tool calls (tools given and parsing on): then it
        comes as one delta at the end, with the calls in the record. The recorded ids are exactly
        the ids the engine streamed (cut after a stop string, as without streaming). Closing
        this iterator early (the client went away) closes the engine's stream, which ends its
        request; the call is then recorded as failed (``metadata["failed_calls"]``), not as a turn.

        Raises:
            GatewayError: as :meth:`complete`; ``GenerateTimedOut`` when the whole stream takes
                longer than ``request_timeout_s``.
        """
        session, pending = self._begin(key, request)
        source = session.stream if session.stream is not None else self.stream_generate
        if source is None:
            session.reserved -= 1
            raise BadRequest(f"session {key!r} has no streaming engine (Gateway(stream_generate=...))")
        holds_all = bool(request.tools) and request.tool_choice != "none" and self.parse_tools is not parse_none
        holdback = max((len(s) for s in request.stop), default=1) - 1
        ids: list[int] = []
        logprobs: list[float] | None = []
        finish: str | None = None
        version: int | None = None
        sent = ""
        done = False
        started = time.perf_counter()
        try:
            async with self._slot() as deadline:
                chunks = source(pending.request)
                try:
                    while finish is None:
                        try:
                            chunk = await _next_within(chunks, max(deadline - time.monotonic(), 1e-3))
                        except StopAsyncIteration:
                            break
                        except asyncio.TimeoutError:
                            raise GenerateTimedOut(
                                f"the streaming engine did not finish {pending.request.request_id} within "
                                f"request_timeout_s={self.limits.request_timeout_s} s"
                            ) from None
                        ids.extend(int(t) for t in chunk.token_ids)
                        if chunk.logprobs is None or logprobs is None:
                            logprobs = None
                        else:
                            logprobs.extend(chunk.logprobs)
                        version = chunk.policy_version if chunk.policy_version is not None else version
                        finish = chunk.finish_reason
                        if len(ids) > pending.max_tokens:  # a delta past the limit: its tail is dropped, cut
                            ids, finish = ids[: pending.max_tokens], "length"
                            if logprobs is not None:
                                logprobs = logprobs[: pending.max_tokens]
                        elif len(ids) == pending.max_tokens:
                            finish = finish or "length"
                        if holds_all or not ids:
                            continue
                        text = self._decode(ids)
                        if request.stop and any(s in text for s in request.stop):
                            finish = "stop"  # the rest would be cut: the engine's request ends here
                            break
                        safe = text[: len(text) - holdback] if holdback else text
                        if safe.endswith("\ufffd"):  # a character split across tokens: wait for its end
                            continue
                        if len(safe) > len(sent) and safe.startswith(sent):
                            yield safe[len(sent) :]
                            sent = safe
                finally:
                    await chunks.aclose()  # ends the engine's request (done, cut, disconnected or timed out)
            generation = Generation(
                token_ids=ids, logprobs=logprobs, finish_reason=finish or "stop", policy_version=version
            )
            read = self._read(generation, pending.max_tokens, request.stop)
            done = True
        except GemCoreError as exc:
            session.failed.append({"call": pending.index, "error": type(exc).__name__, "message": str(exc)[:500]})
            raise
        finally:
            session.reserved -= 1
            if not done and not any(f["call"] == pending.index for f in session.failed):
                session.failed.append(
                    {"call": pending.index, "error": "Disconnected", "message": "the stream was closed before its end"}
                )
        record = self._record(key, session, request, pending, generation, read, time.perf_counter() - started)
        content = record.reply["content"]
        # the rest of the text (all of it when held for tool calls); sent is always a prefix of it, as
        # text is only sent once no stop string can start in it
        if content.startswith(sent) and len(content) > len(sent):
            yield content[len(sent) :]
        yield record

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[float]:
        """A generation slot (queued at most ``request_timeout_s``); yields the call's deadline."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limits.max_concurrent_generations)
        timeout = self.limits.request_timeout_s
        deadline = time.monotonic() + timeout
        try:
            await asyncio.wait_for(self._slots.acquire(), timeout)
        except asyncio.TimeoutError:
            raise GatewayOverloaded(
                f"no generation slot freed within request_timeout_s={timeout} s "
                f"(max_concurrent_generations={self.limits.max_concurrent_generations})"
            ) from None
        try:
            yield deadline
        finally:
            self._slots.release()

    async def _generate(self, request: TurnRequest, generate: Generate) -> Generation:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limits.max_concurrent_generations)
        timeout = self.limits.request_timeout_s
        deadline = time.monotonic() + timeout
        try:
            if self._slots.locked():  # queue, bounded; a free slot is taken without a waiting task
                await asyncio.wait_for(self._slots.acquire(), timeout)
            else:
                await self._slots.acquire()
        except asyncio.TimeoutError:
            raise GatewayOverloaded(
                f"no generation slot freed within request_timeout_s={timeout} s "
                f"(max_concurrent_generations={self.limits.max_concurrent_generations})"
            ) from None
        try:
            return await _bounded(generate(request), max(deadline - time.monotonic(), 1e-3))
        except asyncio.TimeoutError:
            raise GenerateTimedOut(
                f"the generate function did not answer {request.request_id} within request_timeout_s={timeout} s"
            ) from None
        except GemCoreError as exc:
            raise GenerateFailed(f"the generate function failed {request.request_id}: {exc}") from exc
        except Exception as exc:
            raise GenerateFailed(
                f"the generate function raised {type(exc).__name__} for {request.request_id}: {exc}"
            ) from exc
        finally:
            self._slots.release()

    def _read(
        self, generation: Any, max_tokens: int, stops: Sequence[str]
    ) -> tuple[list[int], list[float] | None, str, str]:
        """Check the generate function's answer (token mode) and apply the request's stop strings."""
        if not isinstance(generation, Generation) or generation.token_ids is None:
            raise GenerateFailed(
                f"the generate function returned {type(generation).__name__} without token_ids; the gateway needs "
                "a gem_core.episode.Generation with the sampled ids (token in, token out)"
            )
        ids = list(generation.token_ids)
        if not ids or len(ids) > max_tokens:
            raise GenerateFailed(f"the generate function returned {len(ids)} ids for a limit of {max_tokens}")
        if not all(type(t) is int for t in ids) or min(ids) < 0 or max(ids) >= self.vocab_size:
            raise GenerateFailed(f"the generate function returned ids outside [0, {self.vocab_size}): {ids[:20]}")
        logprobs = None if generation.logprobs is None else [float(x) for x in generation.logprobs]
        if logprobs is not None and (len(logprobs) != len(ids) or not all(math.isfinite(x) for x in logprobs)):
            raise GenerateFailed(f"the generate function returned {len(logprobs)} logprobs (finite, one per id)")
        reason = {"stop": "stop", "length": "length", "repetition": "length"}.get(generation.finish_reason)
        if reason is None:
            raise GenerateFailed(
                f"the generate function finished with {generation.finish_reason!r}; "
                "only 'stop' and 'length' are answers"
            )
        text = self._decode(ids)
        if stops:
            ids, logprobs, text, reason = self._cut_at_stop(ids, logprobs, text, reason, stops)
        return ids, logprobs, text, reason

    def _decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def _cut_at_stop(
        self, ids: list[int], logprobs: list[float] | None, text: str, reason: str, stops: Sequence[str]
    ) -> tuple[list[int], list[float] | None, str, str]:
        """Cut the reply at the first stop string: the ids up to the token that completes it are kept as sampled."""
        if not any(s in text for s in stops):
            return ids, logprobs, text, reason
        for size in range(1, len(ids) + 1):
            head = self._decode(ids[:size])
            at = min((head.find(s) for s in stops if s in head), default=-1)
            if at >= 0:
                return ids[:size], None if logprobs is None else logprobs[:size], head[:at], "stop"
        return ids, logprobs, text, reason
