"""Stand-ins for the parts of a TRL run that cannot run on a CPU test machine, answering as the real ones do.

* :func:`scripted_model_generate`: a ``model.generate`` that answers
  :func:`gem_core.conformance.scripted_generation`, padded the way Hugging Face's
  ``generate`` pads finished rows (the prompt columns, then the new ids, right-padded
  with ``generation_config.pad_token_id``).
* :class:`ScriptedVLLMGeneration`: TRL's ``VLLMGeneration`` (vLLM needs a GPU), same
  ``generate`` signature and return tuple, same ``max_completion_length`` attribute.
* :func:`sleeping_colocate_engine`: TRL's real ``VLLMGeneration`` in colocate mode with
  sleep mode on, its ``vllm.LLM`` replaced by a :class:`RecordingLLM` and its distributed
  backend by a :class:`CountingBackend`, so TRL's own sleep, wake and weight-push code runs
  and is counted (``vllm.SamplingParams`` must be importable from TRL's module, or patched).

Used by the adapter's conformance tests; needs torch and transformers (the ``test`` extra of gem-core).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from gem_core.conformance import ConformanceCase, scripted_generation

__all__ = [
    "CountingBackend",
    "RecordingLLM",
    "ScriptedVLLMGeneration",
    "scripted_model_generate",
    "sleeping_colocate_engine",
    "trainer_config",
    "trainer_on",
]


def scripted_model_generate(case: ConformanceCase, tokenizer: Any) -> Any:
    """``model.generate`` answering ``scripted_generation``: prompt columns, then the new ids right-padded."""
    import torch

    def generate(input_ids: Any, attention_mask: Any, generation_config: Any, **_: Any) -> Any:
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            prompt = [t for t, m in zip(ids, mask, strict=True) if m]
            gen = scripted_generation(case, tokenizer, prompt, generation_config.max_new_tokens)
            rows.append(gen.token_ids or [])
        longest = max(len(r) for r in rows)
        pad = generation_config.pad_token_id
        new = torch.tensor([r + [pad] * (longest - len(r)) for r in rows], dtype=torch.long)
        return torch.cat([input_ids, new.to(input_ids.device)], dim=1)

    return generate


class ScriptedVLLMGeneration:
    """TRL's ``VLLMGeneration`` as the trainer sees it.

    ``generate`` returns ``(prompt_ids, completion_ids, logprobs, logprob_token_ids)``.

    With ``logprobs=0`` (TRL's default) vLLM returns one log-prob per token, the sampled
    token's, and its id; the stop token is part of ``completion_ids``.
    """

    def __init__(self, case: ConformanceCase, tokenizer: Any) -> None:
        self.case = case
        self.tokenizer = tokenizer
        self.max_completion_length = 16
        self.mode = "colocate"
        self.tensor_parallel_size = 1  # TRL's default; the rollout reads it to decide on per-turn syncing
        self.enable_sleep_mode = False  # TRL's default; the rollout keeps a sleeping engine awake per rollout
        self.syncs = 0

    def sync_weights(self) -> None:
        self.syncs += 1

    def generate(self, prompts: list[list[int]], images: Any, num_generations: int, profiler: Any = None) -> tuple:
        assert images is None and num_generations == 1
        gens = [scripted_generation(self.case, self.tokenizer, p, self.max_completion_length) for p in prompts]
        completion_ids = [g.token_ids or [] for g in gens]
        logprobs = [[[lp] for lp in g.logprobs or []] for g in gens]
        logprob_token_ids = [[[t] for t in ids] for ids in completion_ids]
        return [list(p) for p in prompts], completion_ids, logprobs, logprob_token_ids


class RecordingLLM:
    """The ``vllm.LLM`` calls TRL's colocate code makes, recorded; each reply is a guess and the stop token."""

    def __init__(self, tokenizer: Any) -> None:
        self.answer = [*tokenizer.encode("50", add_special_tokens=False), tokenizer.eos_token_id]
        self.calls: list[str] = []
        self.loaded: list[str] = []
        model = SimpleNamespace(load_weights=lambda weights: self.loaded.extend(name for name, _ in weights))
        runner = SimpleNamespace(model_runner=SimpleNamespace(model=model))
        self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=runner))

    def sleep(self, level: int) -> None:
        self.calls.append(f"sleep({level})")

    def wake_up(self, tags: list[str]) -> None:
        self.calls.append(f"wake_up({','.join(tags)})")

    def reset_prefix_cache(self) -> None:
        self.calls.append("reset_prefix_cache")

    def generate(self, prompts: list[dict[str, Any]], sampling_params: Any, use_tqdm: bool) -> list[Any]:
        self.calls.append("generate")
        ids = self.answer[: sampling_params.max_tokens]
        logprobs = [{t: SimpleNamespace(logprob=-0.5, rank=1)} for t in ids]
        return [
            SimpleNamespace(
                prompt_token_ids=p["prompt_token_ids"], outputs=[SimpleNamespace(token_ids=ids, logprobs=logprobs)]
            )
            for p in prompts
        ]


class CountingBackend:
    """TRL's ``DistributedBackend`` surface for a single process, counting the (collective under ZeRO-3) gathers."""

    def __init__(self) -> None:
        self.gathers = 0
        self.is_fsdp = False

    @contextmanager
    def gather_params(self, params: list[Any]) -> Any:
        self.gathers += 1
        yield


def sleeping_colocate_engine(tokenizer: Any) -> Any:
    """TRL's VLLMGeneration as its __init__ leaves it in colocate mode with sleep mode: weights asleep."""
    import torch
    from trl.generation.vllm_generation import VLLMGeneration

    engine = object.__new__(VLLMGeneration)
    engine.__dict__.update(
        model=torch.nn.Linear(2, 2),
        accelerator=SimpleNamespace(num_processes=1, is_main_process=True, process_index=0),
        _dist=CountingBackend(),
        processing_class=tokenizer,
        mode="colocate",
        structured_outputs_regex=None,
        tensor_parallel_size=1,
        enable_sleep_mode=True,
        repetition_penalty=1.0,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        min_p=0.0,
        max_completion_length=256,
        logprobs=0,
        generation_kwargs={},
        llm=RecordingLLM(tokenizer),
        _llm_weights_sleeping=True,
    )
    return engine


def trainer_on(engine: Any, tokenizer: Any, max_completion_length: int = 256) -> Any:
    """What :class:`~gem_trl.rollout.GemRollout` reads of a single-process trainer generating with ``engine``."""
    return SimpleNamespace(
        processing_class=tokenizer,
        chat_template_kwargs={},
        max_completion_length=max_completion_length,
        use_vllm=True,
        vllm_generation=engine,
        eos_token_ids=[tokenizer.eos_token_id],
        accelerator=SimpleNamespace(num_processes=1),
    )


def trainer_config(tmp_path: str | os.PathLike[str], mode: str, **overrides: Any) -> Any:
    """A ``GemGRPOConfig`` for a few CPU steps on the real engine in ``mode`` ("colocate" or "server").

    vLLM's structured outputs keep the random model's replies well-formed guesses, so episodes run
    several turns with rewards that differ (a format error would end each after one turn).
    """
    from gem_trl.trainer import GemGRPOConfig

    settings: dict[str, Any] = {
        "output_dir": str(tmp_path),
        "use_cpu": True,
        "bf16": False,
        "report_to": "none",
        "save_strategy": "no",
        "logging_steps": 1,
        "disable_tqdm": True,
        "per_device_train_batch_size": 3,
        "num_generations": 3,
        "learning_rate": 5e-3,
        "max_completion_length": 96,
        "max_turn_tokens": 10,
        "max_turns": 3,
        "vllm_structured_outputs_regex": r"\\boxed\{[1-9][0-9]?\}",
        "gamma": 0.9,
        "seed": 0,
        "use_vllm": True,
        "vllm_mode": mode,
    }
    settings.update(overrides)
    return GemGRPOConfig(**settings)
