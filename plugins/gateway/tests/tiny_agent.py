"""A tiny random model taught, in a second, to play one tool-calling conversation (the harness tests' model).

A random model never writes a ``<tool_call>``; a few hundred optimizer steps on the exact token
sequences of one conversation make it write them under greedy decoding, so the harnesses see real
tool calls sampled by a real model through the real generate function.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def teach(
    tokenizer: Any,
    examples: Sequence[tuple[list[int], list[int]]],
    folder: Path,
    *,
    steps: int = 100,
    lr: float = 1e-2,
    seed: int = 0,
) -> Path:
    """Fit a tiny Qwen2 to answer each ``prompt`` with ``target`` (loss on the target only); save it to ``folder``."""
    import torch

    from gem_core.testing_models import build_tiny_model

    model = build_tiny_model(
        tokenizer,
        seed=seed,
        generation_tokens=True,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    batch = [(torch.tensor([p + t]), torch.tensor([[-100] * len(p) + t])) for p, t in examples]
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small trains fastest on one thread (no thread contention)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in range(steps):
            optimizer.zero_grad()
            loss = sum(model(input_ids=ids, labels=labels).loss for ids, labels in batch)
            loss.backward()
            optimizer.step()
    torch.set_num_threads(threads)
    model.eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
