"""TRL GRPO on a tiny Qwen2-VL (random weights, from a config): images in every turn's observation reach the loss.

The trainer's ``processing_class`` is the VLM's processor (TRL's documented VLM set-up); the
rollout's engine places each image's tokens with it, ``model.generate`` reads the images, and
every forward of the batch gets the pixel features: gradients reach the vision tower.
"""

from __future__ import annotations

import io
import math
import os
from typing import Any

import numpy as np
import pytest
import torch
from gem_trl import GemGRPOConfig, GemGRPOTrainer, make_prompt_dataset
from gem_trl.rollout import vllm_generate
from gem_trl.vision import batch_image_features

import gem_core
from gem_core.core import Env, ResetReturn, StepReturn
from gem_core.episode import TurnRequest
from gem_core.errors import ConfigError
from gem_core.multimodal import Content, Image
from gem_core.testing_models import build_tiny_vlm, build_tiny_vlm_processor
from gem_core.vision import merge_image_inputs

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ENV_ID = "test:Pictures-v0"
TURNS = 3


def _png(seed: int, turn: int) -> Image:
    from PIL import Image as PILImage

    rng = np.random.default_rng([seed, turn])
    pixels = rng.integers(0, 256, size=(56, 56, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    PILImage.fromarray(pixels).save(buffer, format="PNG")
    return Image.from_bytes(buffer.getvalue())


class Pictures(Env):
    """A new picture every turn for three turns; the reward depends on the reply (so advantages differ)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        self.seed, self.turn = seed or 0, 0
        return Content(_png(self.seed, 0), "Describe the picture."), {}

    def step(self, action: str) -> StepReturn:
        self.turn += 1
        observation = Content("And this one?", _png(self.seed, self.turn))
        return observation, float(len(action) % 3), self.turn >= TURNS, False, {}


class RecordingTrainer(GemGRPOTrainer):
    """Keeps each generation batch and counts the vision tower's forwards inside the loss."""

    records: list[dict[str, Any]]
    vision_calls: int
    vision_calls_in_loss: int
    scoring_forwards_with_images: list[bool]

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        self.records.append({"inputs": [dict(x) for x in inputs], "output": dict(out)})
        return out

    def compute_loss(self, *args: Any, **kwargs: Any) -> Any:
        before = self.vision_calls
        loss = super().compute_loss(*args, **kwargs)
        self.vision_calls_in_loss += self.vision_calls - before
        return loss


@pytest.fixture(scope="module")
def processor() -> Any:
    return build_tiny_vlm_processor()


def _trainer(tmp_path: Any, processor: Any, **overrides: Any) -> RecordingTrainer:
    gem_core.register(ENV_ID, Pictures, override=True)
    settings: dict[str, Any] = {
        "output_dir": str(tmp_path),
        "use_cpu": True,
        "bf16": False,
        "report_to": "none",
        "save_strategy": "no",
        "logging_steps": 1,
        "max_steps": 1,
        "per_device_train_batch_size": 4,
        "num_generations": 2,
        "learning_rate": 1e-2,
        "max_completion_length": 160,
        "max_turn_tokens": 6,
        "max_turns": TURNS,
        "on_cut": "pass",  # the random model's replies reach the env (and their rewards differ)
        "seed": 0,
        "disable_tqdm": True,
        # two passes over each generation batch: TRL scores the old log-probs inside its generation step too
        "num_iterations": 2,
    }
    settings.update(overrides)
    model = build_tiny_vlm(processor)
    trainer = RecordingTrainer(
        model=model,
        args=GemGRPOConfig(**settings),
        train_dataset=make_prompt_dataset(ENV_ID, 4),
        processing_class=processor,
    )
    trainer.records, trainer.vision_calls, trainer.vision_calls_in_loss = [], 0, 0
    trainer.scoring_forwards_with_images = []

    def count(*_: Any) -> None:
        trainer.vision_calls += 1

    def scoring(_: Any, args: Any, kwargs: dict[str, Any]) -> None:
        if "labels" in kwargs:  # TRL's log-prob forwards (old log-probs and the loss), not generate's
            trainer.scoring_forwards_with_images.append(kwargs.get("pixel_values") is not None)

    model.model.visual.register_forward_hook(count)
    model.register_forward_pre_hook(scoring, with_kwargs=True)
    return trainer


@pytest.fixture(scope="module")
def trained(processor: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[RecordingTrainer, dict[str, Any]]:
    trainer = _trainer(tmp_path_factory.mktemp("vlm"), processor)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()
    return trainer, before


def test_a_train_step_on_images_has_a_finite_loss(trained: Any) -> None:
    trainer, _ = trained
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert trainer.state.global_step == 1 and len(losses) == 1 and math.isfinite(losses[0])


def test_gradients_reach_the_vision_tower(trained: Any) -> None:
    trainer, before = trained
    assert trainer.vision_calls_in_loss > 0  # the loss's forwards encoded the images
    # every log-prob forward (old log-probs while the batch is scored, then the loss) had the pixels
    assert len(trainer.scoring_forwards_with_images) >= 2 and all(trainer.scoring_forwards_with_images)
    moved = [n for n, p in trainer.model.named_parameters() if "visual" in n and not torch.equal(p, before[n])]
    assert moved, "no vision-tower weight moved: the loss did not see the images"


def test_the_batch_carries_every_episode_image_in_token_order(trained: Any, processor: Any) -> None:
    trainer, _ = trained
    (record,) = trainer.records
    out, inputs = record["output"], record["inputs"]
    episodes = [x["episode"] for x in inputs]
    # multi-turn: later turns' pictures sit in the completion, each episode keeps all its earlier ones
    assert all(e.num_turns == TURNS for e in episodes)
    assert out["num_images"] == [TURNS] * len(episodes)
    grids = out["image_grid_thw"]
    assert out["pixel_values"].shape[0] == int(grids.prod(dim=1).sum())
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
    image_tokens = (ids == processor.image_token_id).sum(dim=1).tolist()
    per_episode = [int(g.prod(dim=1).sum()) // 4 for g in torch.split(grids, out["num_images"])]
    assert image_tokens == per_episode  # Qwen2-VL: one token per 2x2 merged patches
    assert ((out["completion_ids"] == processor.image_token_id).sum(dim=1) > 0).all()
    # the images are those of each episode's last prompt (the final observation is never encoded)
    assert [len(e.turns[-1].prompt_images) for e in episodes] == out["num_images"]
    assert "image_inputs" not in inputs[0]  # kept out of the reward functions' fields


def test_the_loss_logps_are_the_models_with_the_images(trained: Any, processor: Any) -> None:
    trainer, _ = trained
    out = trainer.records[0]["output"]
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)[:1]
    mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)[:1]
    n = out["num_images"][0]
    rows = int(out["image_grid_thw"][:n].prod(dim=1).sum())
    keep = out["completion_ids"].shape[1]
    trainer.model.eval()
    with torch.no_grad():
        with_images, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            ids,
            mask,
            keep,
            pixel_values=out["pixel_values"][:rows],
            image_grid_thw=out["image_grid_thw"][:n],
            num_images=[n],
        )
        # the same ids with the image tokens' features zeroed: the image reaches the completion's log-probs
        blank, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            ids,
            mask,
            keep,
            pixel_values=torch.zeros_like(out["pixel_values"][:rows]),
            image_grid_thw=out["image_grid_thw"][:n],
            num_images=[n],
        )
    loss_tokens = out["completion_mask"][:1].bool()
    assert torch.isfinite(with_images[loss_tokens]).all()
    assert not torch.allclose(with_images[loss_tokens], blank[loss_tokens])


def test_batch_features_are_none_without_images_and_count_per_episode() -> None:
    assert batch_image_features([None, None]) is None
    piece = {"pixel_values": np.ones((8, 3), np.float32), "image_grid_thw": np.array([[1, 2, 4]])}
    both = merge_image_inputs([piece, piece])
    features = batch_image_features([None, both, piece])
    assert features is not None
    assert features["num_images"] == [0, 2, 1]
    assert features["pixel_values"].shape == (24, 3) and features["image_grid_thw"].shape == (3, 3)


def test_images_with_trls_vllm_engine_are_a_config_error() -> None:
    from types import SimpleNamespace

    trainer = SimpleNamespace(vllm_generation=SimpleNamespace(max_completion_length=8), eos_token_ids=[0])
    request = TurnRequest(episode_index=0, turn=0, prompt_ids=[1, 2], messages=[], max_tokens=4, images=(_png(0, 0),))
    with pytest.raises(ConfigError, match="use_vllm=False"):
        vllm_generate(trainer)([request])
