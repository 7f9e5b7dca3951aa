"""Stand-ins for the parts of a TRL run that cannot run on a CPU test machine, answering as the real ones do.

* :func:`scripted_model_generate`: a ``model.generate`` that answers
  :func:`gem_core.conformance.scripted_generation`, padded the way Hugging Face's
  ``generate`` pads finished rows (the prompt columns, then the new ids, right-padded
  with ``generation_config.pad_token_id``).
* :class:`ScriptedVLLMGeneration`: TRL's ``VLLMGeneration`` (vLLM needs a GPU), same
  ``generate`` signature and return tuple, same ``max_completion_length`` attribute.

Used by the adapter's conformance tests; needs torch and transformers (the ``test`` extra of gem-core).
"""

from __future__ import annotations

from typing import Any

from gem_core.conformance import ConformanceCase, scripted_generation

__all__ = ["ScriptedVLLMGeneration", "scripted_model_generate"]


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
