"""gem's conformance suite through the gateway: its scripted policy behind the gateway, its envs played by a
black-box harness (an ``openai`` SDK loop that only sees text), the captured episodes through gem_core.rl.

The harness steps the case's env once per call and keeps its rewards (the trainer's side knows them);
the records must equal the episode engine's own, token sequences, loss masks and ReBN advantages included.
All five cases: in the cut-generation case the harness applies GEM's rule for a cut reply itself (a reply
with ``finish_reason="length"`` reaches its env as INVALID_ACTION) and reports the actions its env got.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from gem_core.conformance import (
    CASES,
    ConformanceCase,
    _rebn_per_episode,
    assert_conformant,
    record_from_episode,
    scripted_generation,
)
from gem_core.episode import INVALID_ACTION, TurnRequest
from gem_gateway.capture import Gateway
from gem_gateway.server import run_in_thread


def play(case: ConformanceCase, url: str, seed: int) -> tuple[list[float], list[str], bool]:
    """One episode of ``case`` by an SDK loop through the gateway: the env's rewards, its actions, whether cut."""
    sdk = openai.OpenAI(base_url=f"{url}/s/{case.name}-{seed}/v1", api_key="unused", max_retries=0, timeout=60)
    env = case.make_env()
    try:
        observation, _ = env.reset(seed=seed)
        messages: list[Any] = [{"role": "user", "content": observation}]
        rewards: list[float] = []
        actions: list[str] = []
        while True:
            reply = sdk.chat.completions.create(
                model="scripted", messages=messages, max_tokens=case.limits.max_turn_tokens
            )
            text = reply.choices[0].message.content or ""
            # GEM's rule for a reply cut at its token limit, applied by the harness (the engine's on_cut="invalid")
            cut = reply.choices[0].finish_reason == "length" and case.limits.on_cut == "invalid"
            actions.append(INVALID_ACTION if cut else text)
            observation, reward, terminated, truncated, info = env.step(actions[-1])
            rewards.append(float(reward))
            out_of_turns = case.limits.max_turns is not None and len(rewards) >= case.limits.max_turns
            if terminated or truncated or out_of_turns:
                return rewards, actions, bool(truncated or (out_of_turns and not terminated))
            # a tool env's reply is a tool result (as an agent loop sends its tools' output)
            role = "tool" if info.get("tool_calls") else "user"
            messages += [{"role": "assistant", "content": text}, {"role": role, "content": observation}]
    finally:
        env.close()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_captured_episodes_are_conformant(case: ConformanceCase) -> None:
    tokenizer = case.tokenizer()

    async def generate(request: TurnRequest) -> Any:
        return scripted_generation(case, tokenizer, request.prompt_ids or [], request.max_tokens)

    gateway = Gateway(generate, tokenizer, model_name="scripted", tool_parser="none")
    episodes = []
    with run_in_thread(gateway) as url:
        for seed in case.seeds:
            rewards, actions, cut = play(case, url, seed)
            key = f"{case.name}-{seed}"
            gateway.sessions[key].start_state_id = f"{case.env_id}/seed={seed}"
            episodes.append(gateway.finish(key, rewards=rewards, truncated=cut, actions=actions))
    assert all(not e.metadata["branch_points"] for e in episodes)
    advantages = _rebn_per_episode(episodes, case.gamma)
    records = [record_from_episode(e, a.tolist()) for e, a in zip(episodes, advantages, strict=True)]
    assert_conformant(case, records)
