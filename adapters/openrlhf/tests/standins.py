"""Stand-ins for what cannot run on a CPU: vLLM's engine, and the CUDA-only modules OpenRLHF imports.

* :class:`StandInLLM` replaces ``vllm.AsyncLLMEngine`` inside OpenRLHF's own
  ``RolloutRayActor``: ``generate(TokensPrompt, SamplingParams, request_id)`` is an async
  generator of ``RequestOutput`` objects with the fields vLLM 0.29 fills
  (``vllm/outputs.py``: ``CompletionOutput`` index, text, token_ids, cumulative_logprob,
  logprobs as one ``{token_id: Logprob}`` per token, finish_reason, stop_reason). Its
  answers come from a policy function of the prompt ids (the conformance suite's
  scripted policy). The EOS token is kept in ``token_ids`` as vLLM does.
* :func:`install_module_standins` registers the modules OpenRLHF's rollout and
  experience code import at module level but never call here: ``vllm`` (a GPU build),
  ``deepspeed`` and ``flash_attn`` (CUDA builds). OpenRLHF's own tests stub the same
  modules. Everything else (OpenRLHF, torch, transformers, Ray) is real.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gem_core.episode import Generation

VLLM_VERSION = "0.29.0"


@dataclass
class Logprob:
    """vLLM's ``vllm.logprobs.Logprob``."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    """vLLM's ``vllm.outputs.CompletionOutput`` (0.29)."""

    index: int
    text: str
    token_ids: Sequence[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    routed_experts: Any = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    lora_request: Any = None
    sampling_mask: Any = None
    spec_decode_metrics: Any = None


@dataclass
class RequestOutput:
    """vLLM's ``vllm.outputs.RequestOutput`` (0.29), the attributes its constructor sets."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int] | None
    prompt_logprobs: Any
    outputs: list[CompletionOutput]
    finished: bool
    metrics: Any = None
    lora_request: Any = None
    encoder_prompt: str | None = None
    encoder_prompt_token_ids: list[int] | None = None
    num_cached_tokens: int | None = None
    num_cache_creation_tokens: int | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None


@dataclass
class SamplingParams:
    """The fields of ``vllm.SamplingParams`` that OpenRLHF's sample generator sets."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int | None = 16
    min_tokens: int = 0
    skip_special_tokens: bool = True
    logprobs: int | None = None
    stop: list[str] = field(default_factory=list)


class TokensPrompt(dict):  # type: ignore[type-arg]
    """``vllm.inputs.TokensPrompt`` is a TypedDict: a dict at run time."""


Policy = Callable[[list[int], "int | None"], Generation]


class StandInLLM:
    """Answers like ``vllm.AsyncLLMEngine.generate`` from a policy ``(prompt_ids, max_tokens) -> Generation``.

    Attributes:
        calls: ``(prompt_token_ids, sampling_params)`` of every request, in order.
    """

    def __init__(self, tokenizer: Any, policy: Policy) -> None:
        self.tokenizer = tokenizer
        self.policy = policy
        self.calls: list[tuple[list[int], Any]] = []

    async def generate(self, prompt: dict[str, Any], sampling_params: Any, request_id: str) -> AsyncIterator[Any]:
        ids = list(prompt["prompt_token_ids"])
        self.calls.append((ids, sampling_params))
        if sampling_params.max_tokens is not None and sampling_params.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {sampling_params.max_tokens}.")  # as vLLM does
        generation = self.policy(ids, sampling_params.max_tokens)
        token_ids = list(generation.token_ids or [])
        logprobs = None
        if sampling_params.logprobs is not None:
            values = generation.logprobs or [0.0] * len(token_ids)
            logprobs = [
                {t: Logprob(logprob=v, rank=1, decoded_token=self.tokenizer.decode([t]))}
                for t, v in zip(token_ids, values, strict=True)
            ]
        stopped = generation.finish_reason == "stop" and bool(token_ids)
        completion = CompletionOutput(
            index=0,
            # vLLM drops the stop token from the text (a special one or not), and the bytes of a
            # character still incomplete at the end (its incremental detokenizer holds them back)
            text=self.tokenizer.decode(
                token_ids[:-1] if stopped else token_ids, skip_special_tokens=sampling_params.skip_special_tokens
            ).rstrip("\ufffd"),
            token_ids=token_ids,
            cumulative_logprob=None if logprobs is None else float(sum(generation.logprobs or [])),
            logprobs=logprobs,
            finish_reason=generation.finish_reason,
            # vLLM: None when the EOS token (kept in token_ids) or the length limit ended it, else the stop token id
            stop_reason=token_ids[-1] if stopped and token_ids[-1] != self.tokenizer.eos_token_id else None,
        )
        yield RequestOutput(
            request_id=request_id,
            prompt=None,
            prompt_token_ids=ids,
            prompt_logprobs=None,
            outputs=[completion],
            finished=True,
        )


def _module(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__dict__.update(attrs)
    return module


def install_module_standins() -> None:
    """Register ``vllm``, ``deepspeed`` and ``flash_attn`` stand-ins in ``sys.modules`` (idempotent)."""
    if "vllm" in sys.modules:
        return
    vllm = _module("vllm", __version__=VLLM_VERSION, SamplingParams=SamplingParams)
    vllm.__path__ = []  # type: ignore[attr-defined]  # a package, for its submodules
    sys.modules["vllm"] = vllm
    sys.modules["vllm.inputs"] = _module("vllm.inputs", TokensPrompt=TokensPrompt)
    sys.modules["vllm.utils"] = _module("vllm.utils", random_uuid=lambda: uuid.uuid4().hex[:16])
    sys.modules["vllm.outputs"] = _module(
        "vllm.outputs", RequestOutput=RequestOutput, CompletionOutput=CompletionOutput
    )
    sys.modules["vllm.logprobs"] = _module("vllm.logprobs", Logprob=Logprob)

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a CUDA-only function was called in a CPU test")

    deepspeed = _module("deepspeed", utils=types.SimpleNamespace(set_z3_leaf_modules=unavailable))
    sys.modules["deepspeed"] = deepspeed
    for name in ("deepspeed", "deepspeed.runtime", "deepspeed.runtime.zero"):
        sys.modules.setdefault(name, _module(name)).__path__ = []  # type: ignore[attr-defined]
    sys.modules["deepspeed.runtime.zero.partition_parameters"] = _module(
        "deepspeed.runtime.zero.partition_parameters", ZeroParamStatus=type("ZeroParamStatus", (), {})
    )
    flash_attn = _module("flash_attn")
    flash_attn.__path__ = []  # type: ignore[attr-defined]
    sys.modules["flash_attn"] = flash_attn
    sys.modules["flash_attn.bert_padding"] = _module(
        "flash_attn.bert_padding",
        index_first_axis=unavailable,
        pad_input=unavailable,
        rearrange=unavailable,
        unpad_input=unavailable,
    )
    flash_utils = _module("flash_attn.utils")
    flash_utils.__path__ = []  # type: ignore[attr-defined]
    sys.modules["flash_attn.utils"] = flash_utils
    sys.modules["flash_attn.utils.distributed"] = _module("flash_attn.utils.distributed", all_gather=unavailable)
