"""A tiny causal LM that real inference engines (vLLM on the CPU included) load, built in code.

No hub access: a randomly initialised Qwen2 sized for the ChatML test tokenizer of
:mod:`gem_core.testing_tokenizers` is saved, with that tokenizer, as a model folder
(``config.json``, ``model.safetensors``, tokenizer files) that ``vllm.LLM(model=folder)``,
``vllm serve folder``, ``transformers serve`` and ``AutoModelForCausalLM`` all read.

vLLM's CPU attention refuses heads narrower than 32, so the default is hidden 128 with
4 heads (head_dim 32); 2 layers keep it at ~0.5 M parameters (a few MB on disk).
Needs ``torch`` and ``transformers``, imported inside :func:`save_tiny_model`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["save_tiny_model"]


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
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from gem_core.testing_tokenizers import build_chat_tokenizer

    if hidden_size % num_heads or hidden_size // num_heads < 32 or num_heads % 2:
        raise ValueError(
            f"hidden_size {hidden_size} / num_heads {num_heads}: need an even head count dividing the width "
            "into heads of at least 32 (vLLM's CPU attention refuses narrower ones)"
        )
    tokenizer = tokenizer if tokenizer is not None else build_chat_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
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
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        loader: Any = AutoModelForCausalLM  # transformers' stubs leave from_config untyped
        model = loader.from_config(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
