"""What Harbor's terminus-2 agent does to the gateway, with litellm itself as the client (no Harbor here).

terminus-2 (Harbor 0.25, checked against it with ``bench/harbor_gateway.py``, docs/gateway.md)
calls ``litellm.acompletion(model="openai/<name>", api_base=<the session URL>, drop_params=True,
messages=..., temperature=...)``: user and assistant messages with string content, no tools, no
JSON mode, no ``max_tokens``; it reads the reply's JSON (``analysis``, ``plan``, ``commands``
with ``keystrokes``, ``task_complete``, asked twice). Near its context limit it summarises in
three sub-calls (a summary on the whole history, questions on a fresh one, answers on the
history plus the summary) and goes on from the questions' conversation. The harness below does
exactly that, with a real gem terminal task (``text-csv-sum``, the episode sandbox) as its
terminal and the task's checker as the reward, against a scripted model (the model is not what
is tested). Each call is checked token exact against the engine's record.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from gem_core.episode import TurnRequest
from gem_gateway.capture import Gateway
from gem_gateway.server import run_in_thread

# litellm fetches a price list from the internet at import unless told to use its bundled copy
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm", reason="the packages tox env installs litellm (Harbor's LLM client)")
gem_core = pytest.importorskip("gem_core")
pytest.importorskip("gem_terminal", reason="the packages tox env installs gem-terminal")

# litellm's own warning (pydantic on a TypedDict of its GitHub Copilot client, imported lazily at its first call)
pytestmark = pytest.mark.filterwarnings("ignore:Items? .* using the `ReadOnly` qualifier:UserWarning")

SUMMARY = "You are about to hand off your work to another AI agent."
QUESTIONS = "Please begin by asking several questions about the current state of the solution."
ANSWERS = "The next agent has a few questions for you, please answer each of them one by one in detail:\n\n"


def terminus_reply(request: TurnRequest) -> str:
    """A scripted model speaking terminus-2's protocol: the reference commands, then task_complete (twice)."""
    last = request.messages[-1]["content"]
    if SUMMARY in last:
        return "I summed the amount column into /app/total.txt."
    if QUESTIONS in last:
        return "1. Is /app/total.txt written?"
    if ANSWERS in last:
        return "1. Yes."
    said = sum(m["role"] == "assistant" and '"commands"' in m["content"] for m in request.messages)
    command = "python3 -c \"import csv; print(sum(int(r['amount']) for r in csv.DictReader(open('/app/sales.csv'))))\""
    first = {"keystrokes": f"{command} > /app/total.txt\n", "duration": 1.0}
    answer = {"analysis": "a", "plan": "p", "commands": [first] if said == 0 else [], "task_complete": said > 0}
    return json.dumps(answer, indent=2)


def bash(command: str) -> str:
    """The gem terminal env's action running ``command`` (a JSON tool call: any text survives quoting)."""
    return f"<tool_call>{json.dumps({'name': 'bash', 'arguments': {'command': command}})}</tool_call>"


class Terminus:
    """terminus-2's loop through litellm, as Harbor 0.25 drives it, on a gem terminal env."""

    def __init__(self, base_url: str, env: Any, *, summarise_after: int | None) -> None:
        self.base_url, self.env, self.summarise_after = base_url, env, summarise_after
        self.chat: list[dict[str, str]] = []
        self.reward = 0.0

    async def call(self, prompt: str, history: list[dict[str, str]]) -> str:
        response = await litellm.acompletion(
            model="openai/policy",
            api_base=self.base_url,
            api_key="unused",
            drop_params=True,
            logger_fn=None,
            messages=[*history, {"role": "user", "content": prompt}],
            response_format=None,
            reasoning_effort=None,
            temperature=0.7,
        )
        return str(response.choices[0].message.content)

    async def turn(self, prompt: str) -> dict[str, Any]:
        reply = await self.call(prompt, self.chat)
        self.chat += [{"role": "user", "content": prompt}, {"role": "assistant", "content": reply}]
        return dict(json.loads(reply))

    async def summarise(self, instruction: str) -> str:
        summary = await self.call(f"{SUMMARY}\nOriginal Task: {instruction}", self.chat)
        question_prompt = f"Original Task: {instruction}\nSummary:\n{summary}\n{QUESTIONS}"
        questions = await self.call(question_prompt, [])
        await self.call(
            ANSWERS + questions,
            [
                *self.chat,
                {"role": "user", "content": f"{SUMMARY}\nOriginal Task: {instruction}"},
                {"role": "assistant", "content": summary},
            ],
        )
        # terminus-2 keeps its first message, then the questions' conversation
        self.chat = [
            self.chat[0],
            {"role": "user", "content": question_prompt},
            {"role": "assistant", "content": questions},
        ]
        return "Here are the answers the other agent provided.\n\n1. Yes.\n\nContinue working on this task."

    async def run(self) -> None:
        instruction, _ = self.env.reset(seed=0)
        prompt = f"Task Description:\n{instruction}\n\nCurrent terminal state:\n$ "
        confirmed = False
        for episode in range(8):
            if self.summarise_after is not None and episode == self.summarise_after:
                prompt = await self.summarise(instruction)
            answer = await self.turn(prompt)
            outputs = [self.env.step(bash(c["keystrokes"].strip()))[0] for c in answer["commands"]]
            if answer.get("task_complete"):
                if confirmed:
                    _, self.reward, *_ = self.env.step("<done></done>")
                    return
                confirmed = True
                prompt = "Are you sure you want to mark the task as complete? If so, include task_complete true again."
            else:
                confirmed = False
                prompt = "New Terminal Output:\n" + "\n".join(outputs)


@pytest.fixture
def playing(tokenizer: Any, scripted: Any) -> Iterator[tuple[Gateway, Any, str]]:
    engine = scripted(terminus_reply, char_ids=False)
    gateway = Gateway(engine, tokenizer, model_name="policy", tool_parser="none")
    with run_in_thread(gateway) as url:
        yield gateway, engine, url


@pytest.mark.parametrize(
    ("summarise_after", "branches"),
    [
        pytest.param(None, [None, None, None], id="straight"),
        # summary (extends the latest call), questions (a fresh history), answers (extends the summary
        # call), then the main loop on its first message and the questions' conversation (extends no
        # call), as Harbor's own terminus-2 did through the gateway (bench/harbor_gateway.py)
        pytest.param(1, [None, None, "rewritten", "fork", "rewritten", None, None], id="summarised"),
    ],
)
def test_terminus_loop_through_litellm_is_token_exact_and_scored_by_the_task(
    playing: tuple[Gateway, Any, str], summarise_after: int | None, branches: list[str | None]
) -> None:
    gateway, engine, url = playing
    env = gem_core.make("terminal:Tasks-v0-text-csv-sum")
    try:
        agent = Terminus(f"{url}/s/tb/v1", env, summarise_after=summarise_after)
        asyncio.run(agent.run())
    finally:
        env.close()
    calls = gateway.sessions["tb"].calls
    episode = gateway.finish("tb", agent.reward)
    assert agent.reward == 1.0  # the task's own checker passed on what the commands did
    assert [c.branch for c in calls] == branches
    assert episode.metadata["branch_points"] == [i for i, b in enumerate(branches) if b is not None]
    assert [(t.prompt_token_ids, t.action_token_ids) for t in episode.turns] == engine.seen
    # what litellm sent: no tools, no JSON mode, no token limit; the temperature recorded, not applied
    assert all(c.tools is None and c.sampling == {"temperature": 0.7} for c in calls)
    assert {m["role"] for c in calls for m in c.messages} == {"user", "assistant"}
