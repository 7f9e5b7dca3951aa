"""Images in gem-trl: a vision-language model's processor as the trainer's ``processing_class``.

TRL's own VLM path (``GRPOTrainer`` with a processor) reads images from the dataset's
``image``/``images`` column and encodes them with the prompt; with a ``rollout_func`` it
carries no images at all. gem episodes show images in their observations, turn after
turn, so the features come from the episode engine instead (it encodes each image once,
when its message enters the context, with the trainer's own processor):

* :class:`~gem_trl.rollout.GemRollout` builds its engine with ``processor=`` when the
  trainer's ``processing_class`` is a processor, passes each context's images to
  ``model.generate``, and returns every episode's features as the ``image_inputs`` field;
* :class:`~gem_trl.trainer.GemGRPOTrainer` batches them (:func:`batch_image_features`) into
  the keys TRL's loss reads (``pixel_values``, ``image_grid_thw``, ``num_images``), and
  gives every forward of the batch (old, reference and current log-probs) the features
  and ``mm_token_type_ids`` (1 on image tokens, which Qwen2-VL's M-RoPE needs).

Processors that work are those of :class:`gem_core.vision.ImageProcessorTokenizer`
(Qwen2-VL, Qwen2.5-VL): one ``image_grid_thw`` row per image, ``pixel_values`` rows per patch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gem_core.errors import ConfigError
from gem_core.vision import ImageInputs, merge_image_inputs

__all__ = ["IMAGE_FEATURE_KEYS", "batch_image_features", "generate_image_kwargs", "image_token_id", "is_processor"]

#: The processor's feature keys gem-trl carries into TRL's forwards (Qwen2-VL's layout).
IMAGE_FEATURE_KEYS = ("pixel_values", "image_grid_thw")


def is_processor(processing_class: Any) -> bool:
    """Whether ``processing_class`` is a multimodal processor (it holds a tokenizer and an image processor)."""
    return getattr(processing_class, "tokenizer", None) is not None and hasattr(processing_class, "image_processor")


def image_token_id(processing_class: Any) -> int | None:
    """The id the processor repeats for each image token (``None`` for a text tokenizer)."""
    token = getattr(processing_class, "image_token_id", None) if is_processor(processing_class) else None
    return int(token) if token is not None else None


def episode_features(pieces: Sequence[ImageInputs]) -> ImageInputs | None:
    """One episode's image features (its context's pieces joined in token order), ``None`` without images.

    Raises:
        ConfigError: The processor's features are not in Qwen2-VL's layout (no ``image_grid_thw``).
    """
    if not pieces:
        return None
    merged = merge_image_inputs(pieces)
    missing = [key for key in IMAGE_FEATURE_KEYS if key not in merged]
    if missing:
        raise ConfigError(
            f"the processor's image features lack {missing} (it returned {sorted(merged)}); gem-trl trains VLMs "
            "whose processor gives pixel_values and image_grid_thw per image (Qwen2-VL, Qwen2.5-VL)"
        )
    return merged


def batch_image_features(rows: Sequence[ImageInputs | None], device: Any = None) -> dict[str, Any] | None:
    """The features of a batch of episodes in TRL's layout, ``None`` when no episode holds an image.

    Args:
        rows: Each episode's features (:func:`episode_features`), ``None`` for one without images.
        device: Where the tensors go.

    Returns:
        ``pixel_values`` (every image's patch rows, episode by episode), ``image_grid_thw``
        (one row per image) and ``num_images`` (a list, one count per episode), as TRL's
        ``_get_per_token_logps_and_entropies`` and its batch splitting read them.
    """
    import torch

    if not any(row is not None for row in rows):
        return None
    present = [row for row in rows if row is not None]
    merged = merge_image_inputs(present)
    return {
        "pixel_values": torch.from_numpy(np.ascontiguousarray(merged["pixel_values"])).to(device),
        "image_grid_thw": torch.from_numpy(np.ascontiguousarray(merged["image_grid_thw"])).to(device),
        "num_images": [0 if row is None else len(row["image_grid_thw"]) for row in rows],
    }


def generate_image_kwargs(
    pieces_per_row: Sequence[Sequence[ImageInputs]], input_ids: Any, token_id: int | None
) -> dict[str, Any]:
    """``model.generate``'s image arguments for a left-padded batch of contexts (empty when none holds an image).

    Args:
        pieces_per_row: Each request's ``image_inputs`` (the engine's features per piece).
        input_ids: The padded ``(batch, width)`` ids the model reads.
        token_id: The processor's image token id (for ``mm_token_type_ids``).
    """
    features = batch_image_features([episode_features(pieces) for pieces in pieces_per_row], input_ids.device)
    if features is None:
        return {}
    kwargs = {"pixel_values": features["pixel_values"], "image_grid_thw": features["image_grid_thw"]}
    if token_id is not None:
        kwargs["mm_token_type_ids"] = (input_ids == token_id).long()
    return kwargs
