"""A verifiers taskset and harness written with verifiers' SDK, for the live tests.

The taskset yields addition questions scored by a ``@vf.reward`` and a ``@vf.metric``. The
harness runs its chat loop in-process (verifiers' ``Harness.launch`` contract allows it as long
as every model call goes through the interception endpoint): two model turns per episode, the
second after a user follow-up, so episodes are multi-turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from openai import AsyncOpenAI
from verifiers.v1.runtimes import ProgramResult

__all__ = ["AdditionHarness", "AdditionTask", "AdditionTaskset"]

FOLLOW_UP = "Check it once more and give only the number."


class AdditionTask(vf.Task[vf.TaskData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def correct(self, task: vf.TaskData, trace: vf.Trace) -> float:
        return 1.0 if trace.last_reply.strip() == str(task.id) else 0.0

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class AdditionTaskset(vf.Taskset[AdditionTask, vf.TasksetConfig]):
    def load(self) -> Iterator[AdditionTask]:
        for a in range(1, 4):
            yield AdditionTask(
                vf.TaskData(id=str(a + 2), name=f"add-{a}", prompt=f"What is {a} + 2?"), self.config.task
            )


class AdditionHarnessConfig(vf.HarnessConfig):
    pass


class AdditionHarness(vf.Harness[AdditionHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: Any,
        trace: Any,
        runtime: Any,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: Any,
        tool_interception_url: str | None = None,
    ) -> ProgramResult:
        client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
        messages: list[dict[str, Any]] = [{"role": "user", "content": data.prompt}]
        try:
            for follow_up in (FOLLOW_UP, None):
                reply = await client.chat.completions.create(model=ctx.model, messages=messages, max_tokens=8)
                messages.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
                if follow_up:
                    messages.append({"role": "user", "content": follow_up})
        finally:
            await client.close()
        return ProgramResult(exit_code=0, stdout="", stderr="")
