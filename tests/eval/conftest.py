from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gem_core.testing_servers import ServerDidNotStart, free_port, serve_until_healthy


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 30k-parameter Qwen2 with the ChatML test tokenizer, saved like a hub model."""
    torch = pytest.importorskip("torch", reason="the eval tox env installs torch (CPU)")
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from gem_core.testing_tokenizers import build_chat_tokenizer

    tokenizer = build_chat_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    path = tmp_path_factory.mktemp("tiny-model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def openai_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``transformers serve`` (a real OpenAI-compatible server) on loopback, serving the tiny model."""
    cli = Path(sys.executable).parent / "transformers"
    if not cli.exists():
        pytest.skip("transformers[serving] is not installed (the eval tox env installs it)")
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    command = [str(cli), "serve", str(tiny_model_dir), "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    try:
        with serve_until_healthy(command, f"http://127.0.0.1:{port}/health", log, env=env):
            yield f"http://127.0.0.1:{port}/v1"
    except ServerDidNotStart as exc:
        pytest.fail(str(exc))
