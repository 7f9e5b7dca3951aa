"""A vision-language model's processor as the episode engine's tokenizer: image tokens placed by the model's own code.

:class:`ImageProcessorTokenizer` wraps a Hugging Face multimodal processor (Qwen2-VL,
Qwen2.5-VL and processors that work the same way: a chat template that writes one
placeholder per image, and ``processor(text=..., images=...)`` that expands each
placeholder into as many image tokens as the image needs and returns the pixel
features). The episode engine (:class:`~gem_core.episode.EpisodeEngine`, ``processor=``)
renders text with the chat template as for a text model, and encodes every piece that
holds images through the processor, so the number of image tokens is always the
model's own. Each image is processed once, when its message enters the context: a
multi-turn episode keeps the ids and features of earlier images as they are.

gem_core needs no imaging library: the processor decodes pixels. :func:`pil_loader`
(the default ``image_loader``) imports Pillow when the first image is encoded; an
engine that never sees an image never imports it.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from gem_core.errors import ConfigError, ImageError
from gem_core.multimodal import Image

__all__ = ["ImageInputs", "ImageProcessorTokenizer", "image_token_mask", "merge_image_inputs", "pil_loader"]

#: The processor's features of the images of one encoded piece (a first prompt or a bridge):
#: ``{"pixel_values": array, "image_grid_thw": array, ...}`` (the processor's keys, numpy arrays
#: whose first axis runs over the piece's images or their patches).
ImageInputs = dict[str, Any]

#: Keys of a processor's output that are the text's, not the images'.
_TEXT_KEYS = frozenset({"input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids"})


def pil_loader(image: Image) -> Any:
    """Decode ``image`` with Pillow into an RGB ``PIL.Image`` (what Hugging Face image processors take).

    Raises:
        ConfigError: Pillow is not installed.
        ImageError: Pillow cannot decode the bytes.
    """
    try:
        from PIL import Image as PILImage
    except ImportError:  # pragma: no cover - depends on the environment
        raise ConfigError(
            "decoding images for a processor needs Pillow (pip install pillow), or pass image_loader=..."
        ) from None
    try:
        with PILImage.open(io.BytesIO(image.read())) as decoded:
            return decoded.convert("RGB")
    except (OSError, ValueError) as exc:
        raise ImageError(f"{image!r} cannot be decoded: {exc}") from None


def merge_image_inputs(pieces: Sequence[ImageInputs]) -> ImageInputs:
    """The features of many pieces as one model input: each key's arrays joined along the first axis, in order.

    This is the layout Qwen2-VL's ``forward`` takes (``pixel_values`` rows of every image,
    ``image_grid_thw`` one row per image), and what verl's ``multi_modal_inputs`` hold.
    """
    keys: list[str] = []
    for piece in pieces:
        keys.extend(k for k in piece if k not in keys)
    merged: ImageInputs = {}
    for key in keys:
        arrays = [np.asarray(piece[key]) for piece in pieces if key in piece]
        merged[key] = np.concatenate(arrays, axis=0)
    return merged


def image_token_mask(ids: Sequence[int], image_token_id: int) -> np.ndarray:
    """1 where ``ids`` holds the image token, else 0: Qwen2-VL's ``mm_token_type_ids`` (its M-RoPE needs them).

    The processor returns them with a render's ids; the engine's context is built piece by
    piece, so they are read back off the ids.
    """
    mask: np.ndarray = (np.asarray(list(ids), dtype=np.int64) == image_token_id).astype(np.int64)
    return mask


class ImageProcessorTokenizer:
    """A multimodal processor seen as a chat tokenizer that can also encode images.

    Args:
        processor: A Hugging Face processor with ``tokenizer``, ``apply_chat_template`` and
            ``__call__(text=[...], images=[...], return_tensors="np")`` returning ``input_ids``
            and the image features (e.g. ``Qwen2VLProcessor``).
        image_loader: Turns an :class:`~gem_core.multimodal.Image` into what the processor
            takes; default :func:`pil_loader`.

    Raises:
        ConfigError: ``processor`` lacks a tokenizer or a chat template call.
    """

    def __init__(self, processor: Any, *, image_loader: Callable[[Image], Any] | None = None) -> None:
        tokenizer = getattr(processor, "tokenizer", None)
        if tokenizer is None or not callable(getattr(processor, "apply_chat_template", None)):
            raise ConfigError(
                f"{type(processor).__name__} is not a multimodal processor (it needs .tokenizer and "
                ".apply_chat_template); pass the model's AutoProcessor"
            )
        self.processor = processor
        self.tokenizer = tokenizer
        self.image_loader = image_loader or pil_loader
        self.name_or_path = getattr(processor, "name_or_path", None) or getattr(tokenizer, "name_or_path", None)
        #: The id the processor repeats for each image token, when it says (``image_token_id``).
        self.image_token_id: int | None = getattr(processor, "image_token_id", None)

    # the ChatTokenizer protocol: text through the processor's template, ids through its tokenizer
    def apply_chat_template(self, conversation: Any, *args: Any, **kwargs: Any) -> Any:
        return self.processor.apply_chat_template(conversation, *args, **kwargs)

    def encode(self, text: str, *args: Any, **kwargs: Any) -> list[int]:
        return list(self.tokenizer.encode(text, *args, **kwargs))

    def decode(self, token_ids: Any, *args: Any, **kwargs: Any) -> str:
        return str(self.tokenizer.decode(token_ids, *args, **kwargs))

    @property
    def eos_token_id(self) -> Any:
        return getattr(self.tokenizer, "eos_token_id", None)

    def __len__(self) -> int:
        return len(self.tokenizer)

    def encode_with_images(self, text: str, images: Sequence[Image]) -> tuple[list[int], ImageInputs]:
        """Token ids of ``text`` with each image placeholder expanded by the processor, and the images' features.

        Args:
            text: Rendered chat text holding one placeholder per image, in order.
            images: The images, in the order their placeholders appear.

        Raises:
            ImageError: The processor refused the text and images (e.g. placeholders and images
                do not match in number); the message carries the processor's.
        """
        if not images:
            return self.encode(text, add_special_tokens=False), {}
        loaded = [self.image_loader(image) for image in images]
        try:
            out = self.processor(text=[text], images=loaded, return_tensors="np", add_special_tokens=False)
        except (ValueError, IndexError) as exc:
            raise ImageError(
                f"the processor {type(self.processor).__name__} could not place {len(images)} image(s) in the "
                f"rendered text: {exc}. Does the chat template write one image placeholder per image part?"
            ) from None
        ids = [int(t) for t in np.asarray(out["input_ids"])[0]]
        features = {k: np.asarray(v) for k, v in _items(out) if k not in _TEXT_KEYS}
        return ids, features


def _items(out: Any) -> list[tuple[str, Any]]:
    if isinstance(out, Mapping):
        return list(out.items())
    return list(dict(out).items())
