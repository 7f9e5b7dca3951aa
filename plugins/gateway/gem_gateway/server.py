"""The HTTP side: OpenAI's chat completions API (tools, streaming) per session, on aiohttp.

Routes (``<session>`` is the key the harness's base URL carries: ``http://host:port/s/<session>/v1``):

* ``POST /s/<session>/v1/chat/completions``: a chat completion, recorded in the session;
* ``POST /s/<session>/v1/responses``: the Responses API, read as the chat call it stands for
  (:mod:`gem_gateway.responses`), recorded the same way;
* ``GET /s/<session>/v1/models``: the one model served;
* ``GET /health``;
* ``GET /admin/sessions/<session>`` and ``POST /admin/sessions/<session>/finish`` (``{"reward": r}``):
  the trainer's, only with ``Authorization: Bearer <admin_token>`` (without a token they are off).

Streaming chat answers come token by token when the gateway has a streaming engine
(``Gateway(stream_generate=...)``, :meth:`Gateway.complete_stream`): a chunk per text delta as
the engine samples, then each tool call, the finish reason (with the logprobs when asked),
the usage when ``stream_options.include_usage`` asks for it, and ``data: [DONE]``. Without
one (a generate function returns whole replies) the same chunks come once the generation has
ended, the text in one. A client that goes away mid-stream cancels its handler (aiohttp's
``handler_cancellation``), which ends the engine's request.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from aiohttp import web

from gem_gateway.capture import CallRecord, ChatRequest, Gateway, parse_chat_request
from gem_gateway.errors import BadRequest, GatewayError, NotFound, Unauthorized
from gem_gateway.responses import chat_request_from_responses, response_body, response_events

__all__ = ["build_app", "run_in_thread", "serve"]


def _error(exc: GatewayError) -> web.Response:
    return web.json_response(exc.body(), status=exc.status)


def _tool_calls(call: CallRecord) -> list[dict[str, Any]]:
    return [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["function"]["name"], "arguments": json.dumps(c["function"]["arguments"])},
        }
        for c in call.reply.get("tool_calls") or ()
    ]


def _logprobs(gateway: Gateway, call: CallRecord, request: ChatRequest) -> dict[str, Any] | None:
    if not request.logprobs or call.logprobs is None:
        return None
    content = []
    for token, logprob in zip(call.completion_ids, call.logprobs, strict=True):
        text = str(gateway.tokenizer.decode([token]))
        content.append({"token": text, "logprob": logprob, "bytes": list(text.encode()), "top_logprobs": []})
    return {"content": content}


def _usage(call: CallRecord) -> dict[str, int]:
    prompt, completion = len(call.prompt_ids), len(call.completion_ids)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _message(call: CallRecord) -> dict[str, Any]:
    calls = _tool_calls(call)
    content = call.reply["content"]
    message: dict[str, Any] = {"role": "assistant", "content": None if calls and not content else content}
    if calls:
        message["tool_calls"] = calls
    return message


def build_app(gateway: Gateway, *, admin_token: str | None = None) -> web.Application:
    """The aiohttp application serving ``gateway`` (see the module docstring for its routes)."""

    async def chat(request: web.Request) -> web.StreamResponse:
        key = request.match_info["session"]
        try:
            try:
                body = await request.json()
            except json.JSONDecodeError as exc:
                raise BadRequest(f"the request body is not JSON: {exc}") from None
            parsed = parse_chat_request(body)
            if parsed.stream and gateway.can_stream(key):
                return await _stream_live(request, key, gateway, parsed)
            call = await gateway.complete(key, parsed)
        except GatewayError as exc:
            return _error(exc)
        base = {"id": f"chatcmpl-{key}-{call.index}", "created": int(time.time()), "model": gateway.model_name}
        if not parsed.stream:
            return web.json_response(
                {
                    **base,
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "message": _message(call),
                            "logprobs": _logprobs(gateway, call, parsed),
                            "finish_reason": call.finish_reason,
                        }
                    ],
                    "usage": _usage(call),
                }
            )
        return await _stream(request, base, gateway, call, parsed)

    async def responses(request: web.Request) -> web.StreamResponse:
        key = request.match_info["session"]
        try:
            try:
                body = await request.json()
            except json.JSONDecodeError as exc:
                raise BadRequest(f"the request body is not JSON: {exc}") from None
            parsed = chat_request_from_responses(body)
            call = await gateway.complete(key, parsed)
        except GatewayError as exc:
            return _error(exc)
        answer = response_body(call, key, gateway.model_name, body)
        if not parsed.stream:
            return web.json_response(answer)
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await stream.prepare(request)
        for event in response_events(answer):
            await stream.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        await stream.write_eof()
        return stream

    async def models(request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": gateway.model_name, "object": "model", "owned_by": "gem"}]}
        )

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "sessions": len(gateway.sessions)})

    def admitted(request: web.Request) -> None:
        if admin_token is None:
            raise Unauthorized("admin routes are off: start the gateway with an admin token to use them")
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {admin_token}".encode()):
            raise Unauthorized("admin routes need 'Authorization: Bearer <admin token>'")

    async def show(request: web.Request) -> web.Response:
        try:
            admitted(request)
            key = request.match_info["session"]
            session = gateway.sessions.get(key)
            if session is None:
                raise NotFound(f"no open session {key!r}")
            return web.json_response(session.episode(0.0).to_dict())
        except GatewayError as exc:
            return _error(exc)

    async def finish(request: web.Request) -> web.Response:
        try:
            admitted(request)
            try:
                body = await request.json()
            except json.JSONDecodeError as exc:
                raise BadRequest(f"the request body is not JSON: {exc}") from None
            reward = body.get("reward") if isinstance(body, dict) else None
            if not isinstance(reward, (int, float)) or isinstance(reward, bool):
                raise BadRequest('finish needs {"reward": <number>}', param="reward")
            episode = gateway.finish(request.match_info["session"], float(reward))
            return web.json_response(episode.to_dict())
        except GatewayError as exc:
            return _error(exc)

    @web.middleware
    async def typed_errors(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            exc = BadRequest(
                f"the request body is larger than max_body_bytes={gateway.limits.max_body_bytes}; shorten the history"
            )
            return web.json_response(exc.body(), status=413)
        except web.HTTPNotFound:
            return _error(
                NotFound(
                    f"no route {request.method} {request.path}; chat calls go to /s/<session>/v1/chat/completions "
                    "(set the harness's base URL to http://host:port/s/<session>/v1)"
                )
            )
        except web.HTTPMethodNotAllowed:
            return _error(NotFound(f"{request.method} is not served at {request.path}"))

    app = web.Application(client_max_size=gateway.limits.max_body_bytes, middlewares=[typed_errors])
    app.router.add_post("/s/{session}/v1/chat/completions", chat)
    app.router.add_post("/s/{session}/v1/responses", responses)
    app.router.add_get("/s/{session}/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/admin/sessions/{session}", show)
    app.router.add_post("/admin/sessions/{session}/finish", finish)
    return app


async def _stream(
    request: web.Request, base: dict[str, Any], gateway: Gateway, call: CallRecord, parsed: ChatRequest
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)

    async def send(choices: list[dict[str, Any]], **extra: Any) -> None:
        chunk = {**base, "object": "chat.completion.chunk", "choices": choices, **extra}
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

    def delta(content: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> dict[str, Any]:
        return {"index": 0, "delta": content, "logprobs": logprobs, "finish_reason": finish}

    message = _message(call)
    await send([delta({"role": "assistant", "content": ""})])
    if message["content"]:
        await send([delta({"content": message["content"]}, logprobs=_logprobs(gateway, call, parsed))])
    for index, tool_call in enumerate(message.get("tool_calls") or ()):
        await send([delta({"tool_calls": [{"index": index, **tool_call}]})])
    await send([delta({}, call.finish_reason)])
    if parsed.include_usage:
        await send([], usage=_usage(call))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def _stream_live(request: web.Request, key: str, gateway: Gateway, parsed: ChatRequest) -> web.StreamResponse:
    """Chunks as the engine samples; a refusal before the first delta is an HTTP error, a later one an SSE error."""
    base = {"id": f"chatcmpl-{key}", "created": int(time.time()), "model": gateway.model_name}
    async with contextlib.aclosing(gateway.complete_stream(key, parsed)) as events:
        first = await events.__anext__()  # refusals (closed session, limits, context) raise here, before any byte
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)

        async def send(choices: list[dict[str, Any]], **extra: Any) -> None:
            chunk = {**base, "object": "chat.completion.chunk", "choices": choices, **extra}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        def delta(content: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> dict[str, Any]:
            return {"index": 0, "delta": content, "logprobs": logprobs, "finish_reason": finish}

        await send([delta({"role": "assistant", "content": ""})])
        event: str | CallRecord = first
        try:
            while isinstance(event, str):
                if event:
                    await send([delta({"content": event})])
                event = await events.__anext__()
        except GatewayError as exc:  # after the first byte: OpenAI's SDKs raise an "error" event as APIError
            await response.write(f"data: {json.dumps(exc.body())}\n\n".encode())
            await response.write_eof()
            return response
        except ConnectionResetError:  # the client went away: leaving the block closes the engine's stream
            return response
        call = event
        for index, tool_call in enumerate(_tool_calls(call)):
            await send([delta({"tool_calls": [{"index": index, **tool_call}]})])
        await send([delta({}, call.finish_reason, _logprobs(gateway, call, parsed))])
        if parsed.include_usage:
            await send([], usage=_usage(call))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


@contextlib.asynccontextmanager
async def serve(
    gateway: Gateway, host: str = "127.0.0.1", port: int = 0, *, admin_token: str | None = None
) -> AsyncIterator[str]:
    """Serve ``gateway`` on this event loop; yields the server's root URL (``http://host:port``)."""
    # handler_cancellation: a client that disconnects cancels its call, so its engine request ends
    runner = web.AppRunner(build_app(gateway, admin_token=admin_token), access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=2048)
    await site.start()
    sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
    bound = sockets[0].getsockname()[1] if sockets else port
    try:
        yield f"http://{host}:{bound}"
    finally:
        await runner.cleanup()


@contextlib.contextmanager
def run_in_thread(
    gateway: Gateway, host: str = "127.0.0.1", port: int = 0, *, admin_token: str | None = None
) -> Iterator[str]:
    """Serve ``gateway`` from an event loop in a daemon thread (for blocking harnesses); yields the root URL."""
    loop = asyncio.new_event_loop()
    ready: asyncio.Future[str] = loop.create_future()
    stop = asyncio.Event()

    async def main() -> None:
        try:
            async with serve(gateway, host, port, admin_token=admin_token) as url:
                ready.set_result(url)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    thread = threading.Thread(target=lambda: loop.run_until_complete(main()), name="gem-gateway", daemon=True)
    thread.start()
    url = asyncio.run_coroutine_threadsafe(asyncio.wait_for(asyncio.shield(ready), 30), loop).result(35)
    try:
        yield url
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()
