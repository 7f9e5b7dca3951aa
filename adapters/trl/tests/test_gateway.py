"""Episodes played by a black-box harness through ``gem gateway`` train in TRL's GRPOTrainer.

The harness is the ``openai`` SDK's tool-calling loop (a real client over loopback HTTP)
playing a gem env; the policy behind the gateway is the trainer's own tiny model through
``model.generate`` (``GatewayRollout`` serves it per rollout step). Nothing is faked: the
tokens TRL trains on are checked against the generate function's own record of every
request and reply, and ``train()`` runs real optimizer steps.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from typing import Any

import numpy as np
import openai
import pytest
import torch
from gem_gateway.harness import HarnessTask, Outcome
from gem_trl import GemGRPOConfig, GemGRPOTrainer, build_tiny_model, make_prompt_dataset
from gem_trl.gateway import GatewayRollout

import gem_core
from gem_core.episode import BatchGenerate, Generation, TurnRequest
from gem_core.errors import TrajectoryError
from gem_core.rl.advantages import rebn
from gem_core.rl.returns import discounted_returns
from gem_core.testing_tokenizers import build_chat_tokenizer

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# slow: a real train() (2 steps) on the CPU plus a rollout per step through HTTP (about 1-4 minutes here)
pytestmark = pytest.mark.slow

ENV_ID = "core:NumberGuess-v0"
GUESS_TOOL = {
    "type": "function",
    "function": {
        "name": "guess",
        "description": "Guess the number.",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    },
}


def sdk_tool_loop(task: HarnessTask, *, keep_history: bool = True) -> Outcome:
    """The openai SDK's tool loop playing a gem env: a ``guess`` call or the reply's text is the move.

    ``keep_history=False`` sends only the latest observation from the second call on (a harness
    that summarises its context): the gateway records branch points.
    """
    sdk = openai.OpenAI(base_url=task.base_url, api_key="unused", max_retries=0, timeout=120)
    env = gem_core.make(task.env_id or ENV_ID, max_turns=3)
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
            if not keep_history:
                messages = [{"role": "user", "content": observation}]
            elif calls:
                messages += [message.model_dump(exclude_none=True)]
                messages += [{"role": "tool", "tool_call_id": c.id, "content": observation} for c in calls]
            else:
                messages += [{"role": "assistant", "content": message.content or ""}]
                messages += [{"role": "user", "content": observation}]
    finally:
        env.close()
        sdk.close()


class RecordedRollout(GatewayRollout):
    """The gateway rollout, with the generate function's own record of every request and reply."""

    log: list[tuple[list[int], list[int]]]

    def play(self, keys: Any, generate: BatchGenerate, trainer: Any) -> Any:
        def recorded(requests: list[TurnRequest]) -> list[Generation]:
            out = generate(requests)
            pairs = zip(requests, out, strict=True)
            self.log += [(list(r.prompt_ids or []), list(g.token_ids or [])) for r, g in pairs]
            return out

        return super().play(keys, recorded, trainer)


class RecordingTrainer(GemGRPOTrainer):
    """Keeps every generation batch as the loss sees it."""

    records: list[tuple[list[dict[str, Any]], dict[str, Any]]]

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        self.records.append(([dict(x) for x in inputs], dict(out)))
        return out


def _trainer(tmp_path: Any, harness: Any, **overrides: Any) -> tuple[RecordingTrainer, RecordedRollout]:
    tokenizer = build_chat_tokenizer("chatml_tools")
    settings: dict[str, Any] = {
        "output_dir": str(tmp_path),
        "use_cpu": True,
        "bf16": False,
        "report_to": "none",
        "save_strategy": "no",
        "logging_steps": 1,
        "max_steps": 2,
        "per_device_train_batch_size": 4,
        "num_generations": 2,
        "learning_rate": 5e-3,
        "max_completion_length": 160,
        "max_turn_tokens": 8,
        "gamma": 0.9,
        "seed": 0,
        "disable_tqdm": True,
        **overrides,
    }
    rollout = RecordedRollout(harness, gamma=0.9, max_turn_tokens=8, concurrency=2)
    rollout.log = []
    trainer = RecordingTrainer(
        model=build_tiny_model(tokenizer, seed=0),
        args=GemGRPOConfig(**settings),
        train_dataset=make_prompt_dataset(ENV_ID, 8),
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    trainer.records = []
    return trainer, rollout


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[RecordingTrainer, RecordedRollout, dict[str, Any]]:
    trainer, rollout = _trainer(tmp_path_factory.mktemp("gateway"), sdk_tool_loop)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()
    return trainer, rollout, before


def test_train_runs_real_steps_on_captured_episodes(trained: Any) -> None:
    trainer, _, before = trained
    assert trainer.state.global_step == 2
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert any(not torch.equal(p.detach(), before[n]) for n, p in trainer.model.named_parameters())


def test_trained_tokens_are_the_engines_record(trained: Any) -> None:
    """Every token in the loss is a sampled id, in the context the model sampled it in, each exactly once."""
    trainer, rollout, _ = trained
    episodes = [x["episode"] for inputs, _ in trainer.records for x in inputs]
    assert sum(e.num_turns for e in episodes) == len(rollout.log)
    assert max(e.num_turns for e in episodes) > 1
    # harnesses run concurrently: the engine's record is in arrival order, matched by content
    unmatched = Counter((tuple(p), tuple(i)) for p, i in rollout.log)
    for inputs, out in trainer.records:
        loss_mask = out["completion_mask"] * out["tool_mask"]
        for row, x in enumerate(inputs):
            prompt = out["prompt_ids"][row][out["prompt_mask"][row].bool()].tolist()
            length = int(out["completion_mask"][row].sum())
            context = prompt + out["completion_ids"][row][:length].tolist()
            trained_ids = out["completion_ids"][row][loss_mask[row].bool()].tolist()
            sampled: list[int] = []
            for turn in x["episode"].turns:
                engine_prompt, engine_ids = list(turn.prompt_token_ids), turn.action_token_ids
                assert unmatched[(tuple(engine_prompt), tuple(engine_ids))] > 0, "a turn the engine never answered"
                unmatched[(tuple(engine_prompt), tuple(engine_ids))] -= 1
                # the model saw exactly this context: the trained row's tokens up to the turn
                assert context[: len(engine_prompt) + len(engine_ids)] == engine_prompt + engine_ids
                sampled += engine_ids
            assert trained_ids == sampled
            assert x["episode"].metadata["source"] == "gem-gateway"
    assert not +unmatched  # every engine call is a trained turn


def test_advantages_are_core_rebn_of_the_harness_rewards(trained: Any) -> None:
    trainer, _, _ = trained
    for inputs, out in trainer.records:
        returns = [discounted_returns(x["turn_rewards"], 0.9) for x in inputs]
        per_turn = np.split(rebn(np.concatenate(returns)), np.cumsum([len(r) for r in returns])[:-1])
        for row, (x, adv) in enumerate(zip(inputs, per_turn, strict=True)):
            expected = torch.zeros(out["advantages"].shape[1])
            for (start, end), a in zip(x["turn_spans"], adv, strict=True):
                expected[start:end] = float(a)
            torch.testing.assert_close(out["advantages"][row], expected, rtol=1e-5, atol=1e-6)


def test_a_harness_that_rewrites_its_history_is_refused_by_name(tmp_path: Any) -> None:
    trainer, _ = _trainer(tmp_path, lambda task: sdk_tool_loop(task, keep_history=False), max_steps=1)
    with pytest.raises(TrajectoryError, match=r"branch points at calls \[1"):
        trainer.train()
