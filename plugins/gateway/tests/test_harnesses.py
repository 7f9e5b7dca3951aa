"""Real harnesses against the gateway on loopback, a real model behind it (a tiny Qwen2 through
gem eval's transformers generate function, greedy), token exact against the engine's own record.

* the ``openai`` SDK's tool-calling loop (the model was taught the conversation, so it really
  calls the tool, the loop runs it and sends the result back);
* a gem env played by a black-box harness (an SDK loop that only sees text) next to the same
  env played by gem's own episode engine with the same generate function: the same tokens;
* smolagents' ``ToolCallingAgent`` (an agent framework from PyPI), whose calls are recorded with
  their branch points (smolagents rebuilds its history from its memory at each step).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from gem_core.chat import ChatRenderer, render_ids
from gem_core.episode import EpisodeEngine, Generation, TurnRequest
from gem_core.rl.advantages import rebn_advantages
from gem_core.rl.layouts import episode_to_segments
from gem_core.testing import NumberGuessEnv
from gem_gateway.capture import Gateway
from gem_gateway.server import run_in_thread

pytest.importorskip("torch", reason="the eval tox env installs torch (CPU)")
sys.path.insert(0, str(Path(__file__).parent))
from tiny_agent import teach

# the taught tiny model is trained once for the file: under pytest-xdist, on one worker
pytestmark = pytest.mark.xdist_group("gateway-taught-model")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]
FIRST = [{"role": "system", "content": "Use the add tool."}, {"role": "user", "content": "What is 2+3?"}]
TOOL_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
ANSWER = "2+3 = 5"


class Recorded:
    """gem eval's HF generate function, with the engine's own record of every request and answer."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.log: list[tuple[list[int], list[int], list[float] | None]] = []

    async def __call__(self, request: TurnRequest) -> Generation:
        generation = await self.backend.generate(request, request.request_id)
        self.log.append((list(request.prompt_ids or []), list(generation.token_ids or []), generation.logprobs))
        return generation


@pytest.fixture(scope="module")
def taught(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """A tiny model that answers the tool conversation (greedy), and its HF backend."""
    from gem_core.eval.backends import HFBackend, Sampling
    from gem_core.testing_tokenizers import _CORPUS, build_chat_tokenizer

    # merges learned on the conversation too, so its prompts are short (the model trains in seconds)
    plain = build_chat_tokenizer("chatml_tools")
    text = plain.apply_chat_template(FIRST, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    corpus = [*_CORPUS, text, TOOL_CALL, ANSWER, "<tool_response>\n5\n</tool_response>"] * 4
    tokenizer = build_chat_tokenizer("chatml_tools", vocab_size=700, corpus=corpus)
    prompt1 = render_ids(tokenizer, FIRST, add_generation_prompt=True, chat_template_kwargs={"tools": TOOLS})
    call = [*tokenizer.encode(TOOL_CALL, add_special_tokens=False), tokenizer.eos_token_id]
    bridge = ChatRenderer(tokenizer).bridge_ids([{"role": "tool", "content": "5"}], call)
    answer = [*tokenizer.encode(ANSWER, add_special_tokens=False), tokenizer.eos_token_id]
    folder = teach(tokenizer, [(prompt1, call), ([*prompt1, *call, *bridge], answer)], tmp_path_factory.mktemp("m"))
    backend = HFBackend(str(folder), sampling=Sampling(temperature=0.0, max_tokens=64))
    yield tokenizer, backend


def add(a: int, b: int) -> int:
    return a + b


def test_the_openai_sdk_tool_loop_is_captured_token_exact(taught: tuple[Any, Any]) -> None:
    tokenizer, backend = taught
    engine = Recorded(backend)
    gateway = Gateway(engine, tokenizer, model_name="tiny")
    with run_in_thread(gateway) as url:
        sdk = openai.OpenAI(base_url=f"{url}/s/task-1/v1", api_key="unused", max_retries=0, timeout=120)
        messages: list[Any] = list(FIRST)
        tool_calls_made = 0
        for _ in range(4):  # the SDK loop: call, run the requested tools, send their results, until an answer
            reply = sdk.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=64)
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                result = add(**json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": str(result)})
                tool_calls_made += 1
    assert tool_calls_made == 1
    assert messages[-1]["content"] == ANSWER
    episode = gateway.finish("task-1", verifier=lambda e: float("5" in e.turns[-1].action))
    assert episode.total_reward == 1.0
    assert episode.metadata["branch_points"] == []
    # token exact: every turn is what the generate function got and sampled, logprobs included
    assert [(list(t.prompt_token_ids), t.action_token_ids, t.action_logprobs) for t in episode.turns] == engine.log
    (sequence,) = episode_to_segments(episode, advantages=rebn_advantages([episode], gamma=1.0)[0])
    assert sequence.input_ids.tolist() == engine.log[-1][0] + engine.log[-1][1]


def test_a_black_box_harness_playing_a_gem_env_gets_the_engines_tokens(taught: tuple[Any, Any]) -> None:
    """The same env, seed and generate function: gem's episode engine and an SDK loop through the gateway."""
    tokenizer, backend = taught
    max_tokens, seed = 12, 3
    direct = Recorded(backend)
    engine = EpisodeEngine(tokenizer, max_turn_tokens=max_tokens, on_cut="pass")
    played = asyncio.run(engine.play(NumberGuessEnv(max_turns=3), direct, seed=seed)).episode()

    through = Recorded(backend)
    gateway = Gateway(through, tokenizer, model_name="tiny", tool_parser="none")
    env = NumberGuessEnv(max_turns=3)
    total = 0.0
    with run_in_thread(gateway) as url:
        sdk = openai.OpenAI(base_url=f"{url}/s/guess-3/v1", api_key="unused", max_retries=0, timeout=120)
        observation, _ = env.reset(seed=seed)
        messages: list[Any] = [{"role": "user", "content": observation}]
        done = False
        while not done:
            reply = sdk.chat.completions.create(model="tiny", messages=messages, max_tokens=max_tokens)
            text = reply.choices[0].message.content or ""
            observation, reward, terminated, truncated, _ = env.step(text)
            total += reward
            done = terminated or truncated
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": observation}]
    captured = gateway.finish("guess-3", total)
    assert captured.num_turns == played.num_turns == 3
    assert [list(t.prompt_token_ids) for t in captured.turns] == [list(t.prompt_token_ids) for t in played.turns]
    assert [t.action_token_ids for t in captured.turns] == [t.action_token_ids for t in played.turns]
    assert [t.action for t in captured.turns] == [t.action for t in played.turns]
    assert captured.total_reward == pytest.approx(played.total_reward)
    assert captured.metadata["branch_points"] == []


def test_smolagents_tool_calling_agent_through_the_gateway(taught: tuple[Any, Any]) -> None:
    smolagents = pytest.importorskip("smolagents")
    tokenizer, backend = taught
    engine = Recorded(backend)
    gateway = Gateway(engine, tokenizer, model_name="tiny")
    tool = smolagents.tool  # smolagents reads its decorator's name off the source

    @tool
    def add_numbers(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first integer.
            b: The second integer.
        """
        return a + b

    with run_in_thread(gateway) as url:
        model = smolagents.OpenAIServerModel(
            model_id="tiny", api_base=f"{url}/s/smol-1/v1", api_key="unused", max_tokens=24
        )
        agent = smolagents.ToolCallingAgent(tools=[add_numbers], model=model, max_steps=2, verbosity_level=0)
        agent.run("What is 2+3?")
    session = gateway.sessions["smol-1"]
    calls = len(session.calls)
    episode = gateway.finish("smol-1", 0.0)
    assert calls >= 2 and episode.num_turns == calls
    assert [(list(t.prompt_token_ids), t.action_token_ids) for t in episode.turns] == [
        (prompt, ids) for prompt, ids, _ in engine.log
    ]
    sequences = episode_to_segments(episode)
    assert len(sequences) == 1 + len(episode.metadata["branch_points"])
    trained = [t for s in sequences for t in s.input_ids[s.loss_mask == 1].tolist()]
    assert trained == [t for turn in episode.turns for t in turn.action_token_ids]
    print(f"smolagents: {calls} calls, branch points {episode.metadata['branch_points']}")
