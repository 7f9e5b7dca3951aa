"""Images in gem-verl: verl's multimodal agent-loop input from gem image episodes.

verl (0.9.1) gives an agent loop the model's ``processor`` when the model is a VLM, and
documents two multimodal fields: the server's ``generate(..., image_data=[...])`` takes
the images of the prompt ids, and ``AgentLoopOutput.multi_modal_data = {"images": [...]}``
carries a sample's images, in the order of their tokens, to the worker, which encodes them
again with the same processor into ``multi_modal_inputs`` (``pixel_values``,
``image_grid_thw``) and computes the M-RoPE ``position_ids`` for training.

:class:`~gem_verl.agent_loop.GemEnvAgentLoop` builds its episode engine with that
processor (the processor places each image's tokens; each image is encoded once, when its
message enters the context), sends each turn's context images with the request, and puts
each sample's images into ``multi_modal_data``: the whole context's for the sequence
layout, the turn's prompt images for the transition layout. Images are decoded to RGB
``PIL.Image`` s, what verl's processors take (verl depends on Pillow).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gem_core.multimodal import Image
from gem_core.vision import pil_loader

__all__ = ["PilCache", "multi_modal_fields"]


class PilCache:
    """Decodes each image of an episode once (every turn's request sends the whole context's images)."""

    def __init__(self) -> None:
        self._decoded: dict[str, Any] = {}

    def __call__(self, images: Sequence[Image]) -> list[Any]:
        out = []
        for image in images:
            if image.sha256 not in self._decoded:
                self._decoded[image.sha256] = pil_loader(image)
            out.append(self._decoded[image.sha256])
        return out


def multi_modal_fields(images: Sequence[Image] | None, decode: PilCache) -> dict[str, Any]:
    """``AgentLoopOutput``'s ``multi_modal_data`` for a sample with ``images``; nothing for a text sample.

    A text sample leaves the field unset, so verl's ``as_dict`` stores exactly what it did before.
    """
    if not images:
        return {}
    return {"multi_modal_data": {"images": decode(images)}}
