"""The image conformance suite through TRL's GRPOTrainer code path with a VLM's processor (model.generate).

The fake is the generator only: ``model.generate`` answers ``scripted_generation`` (and
records the pixel inputs it was given). The rest is TRL's ``_generate_and_score_completions``
and GemGRPOTrainer's ReBN and image batching; the batch is read back into image records
(ids, masks, advantages, the images in token order and the pixel features TRL's loss gets).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from gem_trl import GemGRPOConfig, GemGRPOTrainer, episode_key, make_prompt_dataset
from gem_trl.testing import scripted_model_generate

from gem_core.conformance_images import (
    IMAGE_CASES,
    ImageConformanceCase,
    ImageConformanceRecord,
    assert_image_conformant,
    image_features_digest,
)
from gem_core.testing_models import build_tiny_vlm

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def trainer_for(case: ImageConformanceCase, output_dir: str) -> GemGRPOTrainer:
    processor = case.processor()
    n = len(case.seeds)
    config = GemGRPOConfig(
        output_dir=output_dir,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        per_device_train_batch_size=n,
        num_generations=n,
        max_completion_length=case.limits.max_episode_tokens,
        max_turn_tokens=case.limits.max_turn_tokens or 64,
        max_turns=case.limits.max_turns,
        gamma=case.gamma,
        on_cut=case.limits.on_cut,
        seed=0,
    )
    return GemGRPOTrainer(
        model=build_tiny_vlm(processor),
        args=config,
        train_dataset=make_prompt_dataset(case.env_id, list(case.seeds)),
        processing_class=processor,
    )


def records_from_trl(inputs: list[dict[str, Any]], out: dict[str, Any]) -> list[ImageConformanceRecord]:
    records = []
    loss = out["completion_mask"] * out["tool_mask"]
    grids = torch.split(out["image_grid_thw"], out["num_images"])
    pixels = torch.split(out["pixel_values"], [int(g.prod(dim=1).sum()) for g in grids])
    for row, x in enumerate(inputs):
        episode = x["episode"]
        prompt = out["prompt_ids"][row][out["prompt_mask"][row].bool()].tolist()
        length = int(out["completion_mask"][row].sum())
        records.append(
            ImageConformanceRecord(
                start_state_id=episode.start_state_id,
                actions=[t.action for t in episode.turns],
                rewards=[t.reward for t in episode.turns],
                terminated=[t.terminated for t in episode.turns],
                truncated=[t.truncated for t in episode.turns],
                input_ids=prompt + out["completion_ids"][row][:length].tolist(),
                loss_mask=[0] * len(prompt) + loss[row][:length].int().tolist(),
                token_advantages=[0.0] * len(prompt) + out["advantages"][row][:length].tolist(),
                images=[i.sha256 for i in episode.turns[-1].prompt_images],
                image_grid_thw=grids[row].tolist(),
                pixel_digest=image_features_digest(pixels[row].numpy()),
            )
        )
    return records


@pytest.mark.parametrize("case", IMAGE_CASES, ids=lambda c: c.name)
def test_trl_image_rollout_conforms(case: ImageConformanceCase, tmp_path: Any) -> None:
    trainer = trainer_for(case, str(tmp_path))
    processor = case.processor()
    scripted = scripted_model_generate(case, processor.tokenizer)
    seen: list[tuple[int, int]] = []

    def generate(input_ids: Any, attention_mask: Any, generation_config: Any, **kwargs: Any) -> Any:
        # every context's images went with it: as many image tokens as the grids give features
        tokens = int((input_ids == processor.image_token_id).sum())
        seen.append((tokens, int(kwargs["image_grid_thw"].prod(dim=1).sum()) // 4))
        assert kwargs["pixel_values"].shape[0] == int(kwargs["image_grid_thw"].prod(dim=1).sum())
        assert torch.equal(kwargs["mm_token_type_ids"], (input_ids == processor.image_token_id).long())
        return scripted(input_ids, attention_mask, generation_config)

    trainer.model.generate = generate  # type: ignore[method-assign]
    inputs = [{"prompt": episode_key(case.env_id, seed)} for seed in case.seeds]
    out = trainer._generate_and_score_completions(inputs)
    assert_image_conformant(case, records_from_trl(inputs, out))
    assert seen and all(tokens == features for tokens, features in seen)
    assert max(e.num_turns for e in (x["episode"] for x in inputs)) > 1  # earlier images kept across turns
