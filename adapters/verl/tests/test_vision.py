"""Image episodes through ``gem_env_agent`` with a VLM's processor, verl's v1 worker and its advantage step.

verl passes the model's processor to the agent loop; the loop sends each turn's context
images with the request (``image_data``) and puts each sample's images into
``AgentLoopOutput.multi_modal_data``. verl's own ``_agent_loop_postprocess`` then encodes
them again with the processor into the stored ``multi_modal_inputs`` and M-RoPE
``position_ids``. The records read back from verl's samples must equal the engine's, images
and pixel features included (the image conformance suite), and a sample as verl stores it
goes through the tiny Qwen2-VL's forward and backward (gradients reach the vision tower).
Stand-ins: the LLM server (scripted, see ``verl_harness``) and TransferQueue.
"""

from __future__ import annotations

import hashlib
import types
from typing import Any

import numpy as np
import pytest
import torch
from verl_harness import Server, Storage, compute_advantage, config, play, row, store

from gem_core.conformance_images import (
    IMAGE_CASES,
    ImageConformanceCase,
    ImageConformanceRecord,
    assert_image_conformant,
    image_features_digest,
    picture_png,
)
from gem_core.multimodal import Image
from gem_core.testing_models import build_tiny_vlm
from gem_core.vision import pil_loader

CASE = IMAGE_CASES[0]


class ImageServer(Server):
    """The scripted server, keeping the images each request carried."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.image_data: list[list[Any]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any):
        self.image_data.append(list(kwargs.get("image_data") or []))
        return await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params)


@pytest.fixture(scope="module")
def vlm() -> Any:
    processor = CASE.processor()
    return build_tiny_vlm(processor)


def verl_processor(case: ImageConformanceCase, model: Any) -> Any:
    """The processor as verl's ``hf_processor`` hands it out: the model's config and M-RoPE index bound to it."""
    from transformers.models.qwen2_vl import Qwen2VLModel

    processor = case.processor()
    processor.config = model.config
    processor.get_rope_index = types.MethodType(Qwen2VLModel.get_rope_index, processor)
    processor.get_vision_position_ids = types.MethodType(Qwen2VLModel.get_vision_position_ids, processor)
    return processor


def pixels_key(image: Any) -> str:
    return hashlib.sha256(image.tobytes()).hexdigest()


def gem_images_by_pixels(case: ImageConformanceCase) -> dict[str, str]:
    """Decoded pixels -> the gem image's SHA-256, for every picture the case's episodes can show."""
    images = [Image.from_bytes(picture_png(seed, turn)) for seed in case.seeds for turn in range(32)]
    return {pixels_key(pil_loader(i)): i.sha256 for i in images}


def run(case: ImageConformanceCase, layout: str, model: Any) -> tuple[list[Any], Storage, list[str], list[ImageServer]]:
    processor = verl_processor(case, model)
    cfg = config(case, layout=layout)
    episodes, servers = [], []
    for index, seed in enumerate(case.seeds):
        server = ImageServer(case, processor.tokenizer)
        fields = row(case.env_id, seed, index=index)
        episodes.append((play(cfg, server, processor.tokenizer, fields, processor=processor), fields))
        servers.append(server)
    storage = Storage()
    keys = store(storage, cfg, processor.tokenizer, episodes, processor=processor)
    return episodes, storage, keys, servers


@pytest.mark.parametrize("layout", ["sequence", "transition"], ids=["per-episode", "per-transition"])
@pytest.mark.parametrize("case", IMAGE_CASES, ids=lambda c: c.name)
def test_image_episodes_through_verl_conform(case: ImageConformanceCase, layout: str, vlm: Any) -> None:
    episodes, storage, keys, servers = run(case, layout, vlm)
    _, data = compute_advantage(storage, case_config := config(case, layout=layout), keys)
    assert case_config.algorithm.adv_estimator == "rebn"
    advantages = [t.numpy().tolist() for t in data["advantages"].unbind()]
    by_pixels = gem_images_by_pixels(case)
    samples = [storage.samples[("train", key)] for key in keys]
    records, position = [], 0
    for (outputs, _), server in zip(episodes, servers, strict=True):
        last = outputs[-1]
        input_ids = last.prompt_ids + last.response_ids
        loss_mask, token_advantages = [0] * len(input_ids), [0.0] * len(input_ids)
        for turn, out in enumerate(outputs):
            start = len(out.prompt_ids)
            for offset, (mask, adv) in enumerate(zip(out.response_mask, advantages[position], strict=True)):
                if mask:
                    loss_mask[start + offset], token_advantages[start + offset] = 1, adv
            # each sample carries the images of its own ids, as verl encoded them
            sample = samples[position]
            inputs = sample["multi_modal_inputs"]
            image_tokens = int((sample["input_ids"] == case.processor().image_token_id).sum())
            assert image_tokens == int(inputs["image_grid_thw"].prod(dim=1).sum()) // 4
            if layout == "transition":  # the turn's prompt: the images sent with that turn's request
                assert [pixels_key(i) for i in out.multi_modal_data["images"]] == [
                    pixels_key(i) for i in server.image_data[turn]
                ]
            position += 1
        images = [by_pixels[pixels_key(i)] for i in last.multi_modal_data["images"]]
        inputs = samples[position - 1]["multi_modal_inputs"]
        gem: dict[str, Any] = last.extra_fields["gem"]
        records.append(
            ImageConformanceRecord(
                start_state_id=gem["start_state_id"],
                actions=gem["actions"],
                rewards=last.extra_fields["turn_scores"],
                terminated=gem["turn_terminated"],
                truncated=gem["turn_truncated"],
                input_ids=input_ids,
                loss_mask=loss_mask,
                token_advantages=token_advantages,
                images=images,
                image_grid_thw=inputs["image_grid_thw"].tolist(),
                pixel_digest=image_features_digest(inputs["pixel_values"].numpy()),
            )
        )
        # every request carried the whole context's images so far: one more per turn
        assert [len(d) for d in server.image_data] == list(range(1, len(server.image_data) + 1))
    assert_image_conformant(case, records)


def test_a_stored_sample_trains_the_vision_tower(vlm: Any) -> None:
    """Verl's stored ids, multi_modal_inputs and M-RoPE position_ids through the model: the image features align."""
    _, storage, keys, _ = run(CASE, "sequence", vlm)
    sample = storage.samples[("train", keys[0])]
    inputs = sample["multi_modal_inputs"]
    ids = sample["input_ids"][None]
    position_ids = sample["position_ids"]  # verl's (4, L): text row, then the 3 M-RoPE rows
    assert position_ids.shape == (4, ids.shape[1])
    model = vlm.train()
    model.zero_grad()
    logits = model(
        input_ids=ids,
        pixel_values=inputs["pixel_values"],
        image_grid_thw=inputs["image_grid_thw"],
        position_ids=position_ids[1:, None, :],
    ).logits
    prompt = sample["prompts"].shape[0]
    response_mask = sample["response_mask"].bool()
    logps = torch.log_softmax(logits[0, prompt - 1 : -1], dim=-1).gather(1, ids[0, prompt:, None])[:, 0]
    (-logps[response_mask].sum()).backward()
    vision_grads = [p.grad for n, p in model.named_parameters() if "visual" in n]
    assert any(g is not None and bool(g.abs().sum() > 0) for g in vision_grads)
    model.eval()


def test_a_text_episode_still_leaves_multi_modal_data_unset() -> None:
    from gem_core.conformance import CASES

    case = CASES[0]
    tokenizer = case.tokenizer()
    (out,) = play(config(case), Server(case, tokenizer), tokenizer, row(case.env_id, case.seeds[0]))
    assert "multi_modal_data" not in out.as_dict()
    assert np.isfinite(out.response_logprobs).all()
