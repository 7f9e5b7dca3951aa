"""A tiny causal LM and chat tokenizer built locally, for tests, the demo and benchmarks.

Nothing is downloaded: the tokenizer is the core's test tokenizer (a byte-level BPE
trained in code, with a ChatML template) and the model a 2-layer Qwen2 made from a
config with random weights. It learns nothing useful; it makes a real
``GRPOTrainer`` run end to end on a CPU in seconds.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_tiny_model", "build_tiny_tokenizer"]


def build_tiny_tokenizer() -> Any:
    """The core's ChatML test tokenizer (``eos="<|im_end|>"``, ``pad="<|endoftext|>"``)."""
    from gem_core.testing_tokenizers import build_chat_tokenizer

    return build_chat_tokenizer("chatml")


def build_tiny_model(tokenizer: Any, *, seed: int = 0, hidden_size: int = 64, num_layers: int = 2) -> Any:
    """A randomly initialised Qwen2 causal LM sized for ``tokenizer``.

    Args:
        tokenizer: Gives the vocabulary size and the special token ids.
        seed: Seeds the weight initialisation (torch's global RNG, restored afterwards).
        hidden_size: Width of the model.
        num_layers: Number of decoder layers.
    """
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model
