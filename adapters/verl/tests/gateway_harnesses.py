"""Harnesses for ``gem_gateway_agent`` (``+gem.harness=gateway_harnesses:...``): the openai SDK's tool loop.

They are what a trainer writes: start the agent program (here an ``openai`` SDK loop, a real
client over loopback HTTP) with the session's base URL, step the gem env with its moves, and
return the env's rewards. The agent program only sees the chat API.
"""

from __future__ import annotations

import json
from typing import Any

import openai
from gem_gateway.harness import HarnessTask, Outcome

import gem_core

GUESS_TOOL = {
    "type": "function",
    "function": {
        "name": "guess",
        "description": "Guess the number.",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    },
}


def _play(task: HarnessTask, *, keep: int | None) -> Outcome:
    sdk = openai.OpenAI(base_url=task.base_url, api_key="unused", max_retries=0, timeout=120)
    env = gem_core.make(task.env_id or "core:NumberGuess-v0", max_turns=3)
    try:
        observation, _ = env.reset(seed=task.seed)
        messages: list[Any] = [{"role": "user", "content": observation}]
        rewards: list[float] = []
        while True:
            reply = sdk.chat.completions.create(model="policy", messages=messages, tools=[GUESS_TOOL], max_tokens=8)
            message = reply.choices[0].message
            calls = message.tool_calls or []
            move = str(json.loads(calls[0].function.arguments).get("n")) if calls else message.content or ""
            observation, reward, terminated, truncated, _ = env.step(move)
            rewards.append(float(reward))
            if terminated or truncated:
                return Outcome(rewards=rewards, truncated=bool(truncated and not terminated))
            if calls:
                messages += [message.model_dump(exclude_none=True)]
                messages += [{"role": "tool", "tool_call_id": c.id, "content": observation} for c in calls]
            else:
                messages += [{"role": "assistant", "content": message.content or ""}]
                messages += [{"role": "user", "content": observation}]
            if keep is not None:  # a harness that keeps only its latest messages (its context window)
                messages = messages[-keep:]
    finally:
        env.close()
        sdk.close()


def append_only(task: HarnessTask) -> Outcome:
    """The usual loop: the whole history every call."""
    return _play(task, keep=None)


def summarising(task: HarnessTask) -> Outcome:
    """Keeps only the latest observation: every call after the first is a branch point."""
    return _play(task, keep=1)
