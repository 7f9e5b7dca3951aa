"""OpenAI's Responses API on top of the chat path: input items in, output items (and stream events) out.

A ``/responses`` request is read as the chat request it stands for (``instructions`` as the
system message; ``message`` items; ``function_call`` items as the assistant's tool calls;
``function_call_output`` items as tool results; function ``tools``), so it is rendered, drift
checked and recorded exactly as a chat call. The gateway keeps no response state: a
``previous_response_id`` is refused (send the whole conversation as ``input``, as with
``store=false``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from gem_gateway.capture import CallRecord, ChatRequest, parse_chat_request
from gem_gateway.errors import BadRequest

__all__ = ["chat_request_from_responses", "response_body", "response_events"]

_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if (
                not isinstance(part, Mapping)
                or part.get("type") not in _TEXT_PARTS
                or not isinstance(part.get("text"), str)
            ):
                raise BadRequest(
                    f"{where}.content[{i}] is not a text part (input_text / output_text); the gateway serves text only",
                    param=f"{where}.content",
                )
            texts.append(part["text"])
        return "".join(texts)
    raise BadRequest(f"{where}.content must be a string or a list of text parts", param=f"{where}.content")


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise BadRequest("instructions must be a string", param="instructions")
        messages.append({"role": "system", "content": instructions})
    raw = body.get("input")
    if isinstance(raw, str):
        return [*messages, {"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise BadRequest("input must be a string or a non-empty list of input items", param="input")
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        if not isinstance(item, Mapping):
            raise BadRequest(f"{where} must be an input item object", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            messages.append({"role": item.get("role"), "content": _text(item.get("content"), where)})
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or not isinstance(item.get("arguments", "{}"), str):
                raise BadRequest(f"{where} (function_call) needs name and arguments (a JSON string)", param=where)
            call = {
                "id": str(item.get("call_id", "")),
                "type": "function",
                "function": {"name": item["name"], "arguments": item.get("arguments", "{}")},
            }
            last = messages[-1] if messages else None
            # the calls of one answer follow its text item (if any): one assistant message, as the chat API has it
            if (
                last is not None
                and last["role"] == "assistant"
                and raw[i - 1].get("type", "message")
                in (
                    "message",
                    "function_call",
                )
            ):
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _text(output, where)
            messages.append({"role": "tool", "tool_call_id": str(item.get("call_id", "")), "content": text})
        else:
            raise BadRequest(
                f"{where} has type {kind!r}; the gateway serves message, function_call and function_call_output items",
                param=where,
            )
    return messages


def _tools(raw: Any) -> list[dict[str, Any]] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise BadRequest("tools must be a list of function tools", param="tools")
    tools = []
    for i, tool in enumerate(raw):
        if not isinstance(tool, Mapping) or tool.get("type") != "function" or not isinstance(tool.get("name"), str):
            raise BadRequest(
                f"tools[{i}] is not a function tool ({{'type': 'function', 'name': ...}}); built-in tools (web search, "
                "file search, computer use) are not served",
                param="tools",
            )
        function = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
        tools.append({"type": "function", "function": function})
    return tools or None


def chat_request_from_responses(body: Any) -> ChatRequest:
    """The chat request a ``/responses`` body stands for.

    Raises:
        BadRequest: what is wrong and how to fix it (``previous_response_id``, an item type or
            tool the gateway does not serve, non-text content, a malformed function call).
    """
    if not isinstance(body, Mapping):
        raise BadRequest("the request body must be a JSON object")
    if body.get("previous_response_id") is not None:
        raise BadRequest(
            "previous_response_id: the gateway keeps no response state; send the whole conversation as input",
            param="previous_response_id",
        )
    chat: dict[str, Any] = {"messages": _messages(body), "stream": bool(body.get("stream", False))}
    tools = _tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = body["tool_choice"]
    for key in ("model", "temperature", "top_p"):
        if key in body:
            chat[key] = body[key]
    try:
        return parse_chat_request(chat)
    except BadRequest as exc:
        # the chat field names, as the Responses API calls them
        raise BadRequest(str(exc).replace("messages", "input").replace("max_tokens", "max_output_tokens")) from None


def _output(call: CallRecord, response_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    content = call.reply.get("content") or ""
    if content or not call.reply.get("tool_calls"):
        items.append(
            {
                "type": "message",
                "id": f"msg_{response_id}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": content, "annotations": []}],
            }
        )
    for j, tool_call in enumerate(call.reply.get("tool_calls") or ()):
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{response_id}_{j}",
                "call_id": tool_call["id"],
                "name": tool_call["function"]["name"],
                "arguments": json.dumps(tool_call["function"]["arguments"]),
                "status": "completed",
            }
        )
    return items


def response_body(call: CallRecord, key: str, model: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The ``response`` object answering ``call`` (``status`` ``incomplete`` when cut at its token limit)."""
    response_id = f"resp_{key}_{call.index}"
    cut = call.finish_reason == "length"
    prompt, completion = len(call.prompt_ids), len(call.completion_ids)
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "error": None,
        "instructions": body.get("instructions"),
        "model": model,
        "output": _output(call, response_id),
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": list(body.get("tools") or []),
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "max_output_tokens": body.get("max_output_tokens"),
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion,
        },
    }


def response_events(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The server-sent events of a streamed response (sent once the generation has ended), in order."""
    events: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **fields})

    emit("response.created", response={**response, "status": "in_progress", "output": []})
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            emit(
                "response.output_item.added", output_index=index, item={**item, "content": [], "status": "in_progress"}
            )
            part = item["content"][0]
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            emit("response.content_part.added", **where, part={**part, "text": ""})
            if part["text"]:
                emit("response.output_text.delta", **where, delta=part["text"], logprobs=[])
            emit("response.output_text.done", **where, text=part["text"], logprobs=[])
            emit("response.content_part.done", **where, part=part)
        else:
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            where = {"item_id": item["id"], "output_index": index}
            emit("response.function_call_arguments.delta", **where, delta=item["arguments"])
            emit("response.function_call_arguments.done", **where, arguments=item["arguments"], name=item["name"])
        emit("response.output_item.done", output_index=index, item=item)
    emit(f"response.{response['status']}", response=response)
    return events
