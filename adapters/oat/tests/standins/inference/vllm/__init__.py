"""Stand-in for vLLM 0.8.4's offline ``LLM`` (vLLM needs a GPU): the only fake in the oat tests.

The "model" is a policy registered for a model folder: ``policy(prompt_ids) -> (ids, logprobs)``
gives the tokens the model would sample if nothing stopped it. ``LLM.generate`` then applies
vLLM's rules: generation stops at the first stop token (the tokenizer's EOS or
``stop_token_ids``), which stays in ``token_ids`` but not in ``text``
(``skip_special_tokens``), ``finish_reason="stop"``; or at ``max_tokens``,
``finish_reason="length"``, which vLLM 0.8's V1 engine tests first (a stop token sampled as
the last allowed token also gives ``"length"``). ``logprobs`` holds one ``{token_id: Logprob}`` per token when
``SamplingParams.logprobs`` is set, else ``None``.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sequence import Logprob

__version__ = "0.8.4"

Policy = Callable[[list[int]], tuple[list[int], list[float]]]
_POLICIES: dict[str, Policy] = {}
_request_ids = itertools.count()


def register_policy(model: str, policy: Policy) -> None:
    """Make ``LLM(model=model)`` answer with ``policy`` (test helper, not a vLLM API)."""
    _POLICIES[str(model)] = policy


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    stop: list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    logprobs: int | None = None
    skip_special_tokens: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def clone(self) -> SamplingParams:
        return copy.deepcopy(self)


class LLM:
    def __init__(self, model: str, **kwargs: Any) -> None:
        from transformers import AutoTokenizer

        if str(model) not in _POLICIES:
            raise ValueError(f"stand-in vLLM: no policy registered for model {model!r}")
        self.model = str(model)
        self.kwargs = kwargs
        self._policy = _POLICIES[self.model]
        self._tokenizer = AutoTokenizer.from_pretrained(self.model)
        self.calls: list[int] = []  # batch size of each generate call

    def get_tokenizer(self) -> Any:
        return self._tokenizer

    def generate(
        self,
        prompts: Any = None,
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        prompt_token_ids: list[list[int]] | None = None,
        use_tqdm: bool = True,
        lora_request: Any = None,
        **kwargs: Any,
    ) -> list[RequestOutput]:
        if prompt_token_ids is not None:  # the deprecated keyword form oat's ActorBase.generate uses
            prompts = [{"prompt_token_ids": ids} for ids in prompt_token_ids]
        if prompts is None:
            raise ValueError("either prompts or prompt_token_ids must be given")
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        params = sampling_params if sampling_params is not None else SamplingParams()
        if isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        elif len(params) != len(prompts):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        self.calls.append(len(prompts))
        return [self._one(prompt, p, lora_request) for prompt, p in zip(prompts, params, strict=True)]

    def _one(self, prompt: Any, params: SamplingParams, lora_request: Any) -> RequestOutput:
        tok = self._tokenizer
        if isinstance(prompt, str):
            text, ids = prompt, tok.encode(prompt)
        else:
            ids = list(prompt["prompt_token_ids"])
            text = prompt.get("prompt")
        stops = set(params.stop_token_ids or [])
        if not params.ignore_eos and tok.eos_token_id is not None:
            stops.add(int(tok.eos_token_id))
        outputs = []
        for index in range(params.n):
            sampled, logps = self._policy(list(ids))
            out_ids: list[int] = []
            finish, stop_reason = "length", None
            for token in sampled:
                out_ids.append(int(token))
                # vLLM 0.8's V1 engine (vllm/v1/core/sched/utils.py: check_stop) tests the length cap
                # first: a stop token sampled as the last allowed token still finishes with "length".
                if params.max_tokens is not None and len(out_ids) >= params.max_tokens:
                    break
                if token in stops:
                    finish = "stop"
                    stop_reason = None if token == tok.eos_token_id else int(token)
                    break
            logprobs = None
            cumulative = None
            if params.logprobs is not None:
                logprobs = [
                    {t: Logprob(logprob=float(lp), rank=1, decoded_token=tok.decode([t]))}
                    for t, lp in zip(out_ids, logps[: len(out_ids)], strict=True)
                ]
                cumulative = float(sum(logps[: len(out_ids)]))
            outputs.append(
                CompletionOutput(
                    index=index,
                    # vLLM drops the stop token from the text (a special one or not), and the bytes of a
                    # character still incomplete at the end (its incremental detokenizer holds them back)
                    text=tok.decode(
                        out_ids[:-1] if finish == "stop" else out_ids, skip_special_tokens=params.skip_special_tokens
                    ).rstrip("\ufffd"),
                    token_ids=out_ids,
                    cumulative_logprob=cumulative,
                    logprobs=logprobs,
                    finish_reason=finish,
                    stop_reason=stop_reason,
                    lora_request=lora_request,
                )
            )
        return RequestOutput(
            request_id=str(next(_request_ids)),
            prompt=text,
            prompt_token_ids=ids,
            prompt_logprobs=None,
            outputs=outputs,
            finished=True,
            lora_request=lora_request,
            num_cached_tokens=0,
        )
