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

from gem_core.conformance import CASES, ConformanceCase, ConformanceRecord, assert_conformant, scripted_generation

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def scripted_model_generate(case: ConformanceCase, tokenizer: Any) -> Any:
    """``model.generate`` answering ``scripted_generation``: prompt columns, then the new ids right-padded."""

    def generate(input_ids: torch.Tensor, attention_mask: torch.Tensor, generation_config: Any, **_: Any) -> Any:
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            prompt = [t for t, m in zip(ids, mask, strict=True) if m]
            gen = scripted_generation(case, tokenizer, prompt, generation_config.max_new_tokens)
            rows.append(gen.token_ids or [])
        longest = max(len(r) for r in rows)
        pad = generation_config.pad_token_id
        new = torch.tensor([r + [pad] * (longest - len(r)) for r in rows], dtype=torch.long)
        return torch.cat([input_ids, new.to(input_ids.device)], dim=1)

    return generate


class ScriptedVLLMGeneration:
    """TRL's ``VLLMGeneration`` as the trainer sees it: ``generate`` -> (prompt_ids, completion_ids, logprobs, logprob_token_ids).

    With ``logprobs=0`` (TRL's default) vLLM returns one log-prob per token, the sampled
    token's, and its id; the stop token is part of ``completion_ids``.
    """

    def __init__(self, case: ConformanceCase, tokenizer: Any) -> None:
        self.case = case
        self.tokenizer = tokenizer
        self.max_completion_length = 16
        self.mode = "colocate"
        self.syncs = 0

    def sync_weights(self) -> None:
        self.syncs += 1

    def generate(self, prompts: list[list[int]], images: Any, num_generations: int, profiler: Any = None) -> tuple:
        assert images is None and num_generations == 1
        gens = [scripted_generation(self.case, self.tokenizer, p, self.max_completion_length) for p in prompts]
        completion_ids = [g.token_ids or [] for g in gens]
        logprobs = [[[lp] for lp in g.logprobs or []] for g in gens]
        logprob_token_ids = [[[t] for t in ids] for ids in completion_ids]
        return [list(p) for p in prompts], completion_ids, logprobs, logprob_token_ids


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
