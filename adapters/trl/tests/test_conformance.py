"""The conformance suite through TRL's own GRPOTrainer code path, with model.generate and with vLLM.

The only fakes are the generators: a model whose ``generate`` returns exactly
``scripted_generation`` (padded the way Hugging Face's ``generate`` pads finished rows),
and, for ``use_vllm=True`` (which needs a GPU), an engine that answers in the format of
TRL's ``VLLMGeneration.generate``. Everything else is TRL's real
``GRPOTrainer._generate_and_score_completions`` (padding, masks, rewards, log-probs) and
GemGRPOTrainer's ReBN; its output is read back into ConformanceRecords.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from gem_trl import GemGRPOConfig, GemGRPOTrainer, build_tiny_model, episode_key, make_prompt_dataset
from gem_trl.testing import ScriptedVLLMGeneration, scripted_model_generate

from gem_core.conformance import CASES, ConformanceCase, ConformanceRecord, assert_conformant

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def trainer_for(case: ConformanceCase, output_dir: str) -> GemGRPOTrainer:
    """A GemGRPOTrainer with the case's limits mapped onto TRL's and gem's settings."""
    tokenizer = case.tokenizer()
    n = len(case.seeds)
    config = GemGRPOConfig(
        output_dir=output_dir,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        per_device_train_batch_size=n,
        num_generations=n,  # the case's episodes are one batch: ReBN over all of them, as the reference
        max_completion_length=case.limits.max_episode_tokens,
        max_turn_tokens=case.limits.max_turn_tokens or 64,
        max_turns=case.limits.max_turns,
        gamma=case.gamma,
        on_cut=case.limits.on_cut,
        seed=0,
    )
    trainer = GemGRPOTrainer(
        model=build_tiny_model(tokenizer),
        args=config,
        train_dataset=make_prompt_dataset(case.env_id, list(case.seeds)),
        processing_class=tokenizer,
        wrappers=list(case.wrappers),
        env_kwargs=dict(case.env_kwargs),
    )
    trainer.model.train()
    return trainer


def records_from_trl(inputs: list[dict[str, Any]], out: dict[str, Any]) -> list[ConformanceRecord]:
    """TRL's padded batch (and the per-episode fields it merged into ``inputs``) as ConformanceRecords."""
    records = []
    loss = out["completion_mask"] * out["tool_mask"]
    for row, x in enumerate(inputs):
        episode = x["episode"]
        assert x["truncated"] == episode.truncated and x["terminated"] == episode.terminated
        prompt = out["prompt_ids"][row][out["prompt_mask"][row].bool()].tolist()
        length = int(out["completion_mask"][row].sum())
        records.append(
            ConformanceRecord(
                start_state_id=episode.start_state_id,
                actions=[t.action for t in episode.turns],
                rewards=[t.reward for t in episode.turns],
                terminated=[t.terminated for t in episode.turns],
                truncated=[t.truncated for t in episode.turns],
                input_ids=prompt + out["completion_ids"][row][:length].tolist(),
                loss_mask=[0] * len(prompt) + loss[row][:length].int().tolist(),
                token_advantages=[0.0] * len(prompt) + out["advantages"][row][:length].tolist(),
            )
        )
    return records


@pytest.mark.parametrize("backend", ["model.generate", "vllm"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_trl_rollout_conforms(case: ConformanceCase, backend: str, tmp_path: Any) -> None:
    trainer = trainer_for(case, str(tmp_path))
    tokenizer = trainer.processing_class
    if backend == "vllm":
        # What GRPOTrainer.__init__ sets up with use_vllm=True (vLLM itself needs a GPU).
        engine = ScriptedVLLMGeneration(case, tokenizer)
        trainer.use_vllm, trainer.vllm_generation, trainer._last_loaded_step = True, engine, -1
    else:
        trainer.model.generate = scripted_model_generate(case, tokenizer)  # type: ignore[method-assign]
    inputs = [{"prompt": episode_key(case.env_id, seed)} for seed in case.seeds]
    out = trainer._generate_and_score_completions(inputs)
    assert_conformant(case, records_from_trl(inputs, out))
    if backend == "vllm":
        assert engine.syncs == 1 and engine.max_completion_length == 16  # restored after every turn
        # TRL received the sampling log-probs of exactly the generated tokens (for its importance sampling)
        sampled = out["sampling_per_token_logps"] * out["tool_mask"]
        for row, x in enumerate(inputs):
            for (start, end), turn in zip(x["turn_spans"], x["episode"].turns, strict=True):
                torch.testing.assert_close(
                    sampled[row, start:end], torch.tensor(turn.action_logprobs, dtype=sampled.dtype)
                )
        assert "importance_sampling_ratio" in out
