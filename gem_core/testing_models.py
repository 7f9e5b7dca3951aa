"""Tiny causal LMs built in code: one builder for every test's model, and a model folder inference engines load.

:func:`build_tiny_model` is the one way the tests build a random tiny model in memory
(the adapters' trainer steps, TRL's demo model); :func:`save_tiny_model` saves one that
real inference engines (vLLM on the CPU included) load.

No hub access: a randomly initialised Qwen2 sized for the ChatML test tokenizer of
:mod:`gem_core.testing_tokenizers` is saved, with that tokenizer, as a model folder
(``config.json``, ``model.safetensors``, tokenizer files) that ``vllm.LLM(model=folder)``,
``vllm serve folder``, ``transformers serve`` and ``AutoModelForCausalLM`` all read.

vLLM's CPU attention refuses heads narrower than 32, so the default is hidden 128 with
4 heads (head_dim 32); 2 layers keep it at ~0.5 M parameters (a few MB on disk).
Needs ``torch`` and ``transformers``, imported inside the functions.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Literal

__all__ = ["build_tiny_model", "build_tiny_vlm", "build_tiny_vlm_processor", "save_tiny_model"]

#: The smallest decoder the tests train: one layer of width 32, two heads sharing one key/value head.
TINY_SIZES: dict[str, int] = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}


def build_tiny_model(
    tokenizer: Any,
    *,
    architecture: Literal["qwen2", "llama"] = "qwen2",
    seed: int = 0,
    restore_rng: bool = True,
    attention: str | None = None,
    dtype: Any = None,
    generation_tokens: bool = False,
    **config: Any,
) -> Any:
    """A randomly initialised causal LM over ``tokenizer``'s vocabulary, in memory.

    Args:
        tokenizer: Gives the vocabulary size (``len(tokenizer)``) unless ``vocab_size`` is given.
        architecture: ``"qwen2"`` or ``"llama"`` (the config class).
        seed: ``torch.manual_seed`` right before the weights are drawn: same arguments, same weights.
        restore_rng: Put torch's global RNG back afterwards; ``False`` leaves it seeded by
            ``seed`` and advanced by the initialisation, as a test that seeds torch and then
            builds its model (its later draws then depend on that).
        attention: ``config._attn_implementation`` (``"sdpa"``, ``"eager"``), else the default.
        dtype: Passed to ``from_config`` (``torch.float32``), else the default.
        generation_tokens: Copy the tokenizer's eos and pad ids into the model's generation config.
        **config: Config fields over :data:`TINY_SIZES` (``hidden_size=64``,
            ``max_position_embeddings=512``, ``tie_word_embeddings=True``, ``eos_token_id=...``).
    """
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    kind = {"qwen2": Qwen2Config, "llama": LlamaConfig}[architecture]
    model_config = kind(**{"vocab_size": len(tokenizer), **TINY_SIZES, **config})
    if attention is not None:
        model_config._attn_implementation = attention
    loader: Any = AutoModelForCausalLM  # transformers' stubs leave from_config untyped
    options = {} if dtype is None else {"dtype": dtype}
    with torch.random.fork_rng(devices=[]) if restore_rng else contextlib.nullcontext():
        torch.manual_seed(seed)
        model = loader.from_config(model_config, **options)
    if generation_tokens:
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def save_tiny_model(
    path: str | Path,
    tokenizer: Any = None,
    *,
    hidden_size: int = 128,
    num_heads: int = 4,
    num_layers: int = 2,
    seed: int = 0,
    init_std: float = 0.2,
) -> Path:
    """Save a random Qwen2 model and its tokenizer to ``path`` (created if missing); return the path.

    Args:
        path: The model folder.
        tokenizer: A Hugging Face tokenizer; default :func:`~gem_core.testing_tokenizers.build_chat_tokenizer`.
        hidden_size: Model width; ``hidden_size // num_heads`` must be at least 32 for vLLM's CPU backend.
        num_heads: Attention heads (half as many key/value heads, grouped-query attention).
        num_layers: Decoder layers.
        seed: Seeds the weights (torch's global RNG is restored afterwards): same arguments, same files.
        init_std: Standard deviation of the weights. Wider than the usual 0.02 so that logits are far
            apart: greedy decoding then picks the same token whatever the batch shape or kernel
            (near-ties would flip between a batched engine and a server on float rounding).

    Raises:
        ValueError: A head narrower than 32 (vLLM's CPU backend refuses it) or a width that the
            heads do not divide.
    """
    from gem_core.testing_tokenizers import build_chat_tokenizer

    if hidden_size % num_heads or hidden_size // num_heads < 32 or num_heads % 2:
        raise ValueError(
            f"hidden_size {hidden_size} / num_heads {num_heads}: need an even head count dividing the width "
            "into heads of at least 32 (vLLM's CPU attention refuses narrower ones)"
        )
    tokenizer = tokenizer if tokenizer is not None else build_chat_tokenizer()
    model = build_tiny_model(
        tokenizer,
        seed=seed,
        generation_tokens=True,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads // 2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        initializer_range=init_std,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_tiny_vlm_processor(*, min_pixels: int = 4 * 28 * 28, max_pixels: int = 16 * 28 * 28) -> Any:
    """A real ``Qwen2VLProcessor`` over the ``chatml_vision`` test tokenizer, built in code (no hub).

    Its image processor is transformers' Pillow one (``Qwen2VLImageProcessorPil``): 14-pixel
    patches merged 2x2, each image resized to between ``min_pixels`` and ``max_pixels``, so
    an image brings 4 to 16 image tokens. The processor has no video processor (that one
    needs torchvision); images are all gem envs show.

    Needs ``transformers`` (and Pillow, which its image processor imports).
    """
    from transformers import Qwen2VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from gem_core.testing_tokenizers import CHAT_TEMPLATES, build_chat_tokenizer

    base: Any = Qwen2VLProcessor  # transformers' processors are untyped

    class ImageOnlyQwen2VLProcessor(base):  # type: ignore[misc]
        """Qwen2-VL's processor without a video processor: transformers checks the class of each part given."""

        def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
            if argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    tokenizer = build_chat_tokenizer("chatml_vision")
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=min_pixels, max_pixels=max_pixels, patch_size=14, merge_size=2, temporal_patch_size=2
    )
    return ImageOnlyQwen2VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=None,
        chat_template=CHAT_TEMPLATES["chatml_vision"],
    )


def build_tiny_vlm(processor: Any, *, seed: int = 0, hidden_size: int = 64) -> Any:
    """A randomly initialised ``Qwen2VLForConditionalGeneration`` (~0.2 M parameters) for ``processor``'s tokens.

    One vision block (width 32) and one decoder layer (``hidden_size`` wide, two heads,
    multimodal rotary sections sized to the head), with the processor's image, video and
    vision start/end token ids. Torch's global RNG is restored afterwards.
    """
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    tokenizer = processor.tokenizer
    half_head = hidden_size // 2 // 2  # two heads; rotary sections cover half a head
    sections = [half_head - 2 * (half_head // 3), half_head // 3, half_head // 3]
    token = tokenizer.convert_tokens_to_ids
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": hidden_size,
            "intermediate_size": 2 * hidden_size,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "max_position_embeddings": 4096,
            "rope_parameters": {"rope_type": "default", "mrope_section": sections, "rope_theta": 10000.0},
            "bos_token_id": None,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "depth": 1,
            "embed_dim": 32,
            "hidden_size": hidden_size,
            "num_heads": 2,
            "mlp_ratio": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "in_channels": 3,
        },
        image_token_id=token("<|image_pad|>"),
        video_token_id=token("<|video_pad|>"),
        vision_start_token_id=token("<|vision_start|>"),
        vision_end_token_id=token("<|vision_end|>"),
    )
    model_class: Any = Qwen2VLForConditionalGeneration  # untyped in transformers' stubs
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval()
