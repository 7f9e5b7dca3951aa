"""The vLLM stand-ins of the adapter tests held to the real engine: the same requests, the same fields.

The stand-ins are loaded by file path (no trainer is installed here). Each case runs one
request through the session's ``vllm.LLM``; the stand-in's "model" then answers with the
tokens vLLM sampled (followed by tokens a stopped engine must never show), and every field
an adapter reads is compared: ``token_ids`` (stop token kept), ``text`` (stop token dropped),
``finish_reason``, ``stop_reason``, the sampled token's ``Logprob`` (value, and that it is
there), ``cumulative_logprob``. Where a stand-in models an older vLLM, the fields whose
meaning changed since are asserted as that version had them (docs/real-engines.md lists them).
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gem_core.episode import Generation

ROOT = Path(__file__).resolve().parents[2]
OAT_VLLM = ROOT / "adapters/oat/tests/standins/inference/vllm"
OPENRLHF_STANDINS = ROOT / "adapters/openrlhf/tests/standins.py"
#: Tokens the stand-in's model "would sample next": an engine that stopped must not show them.
AFTER_STOP = [7, 7, 7, 7]


@dataclass(frozen=True)
class Case:
    id: str
    max_tokens: int
    stop_at: int | None = None  # position of the sampled token made a stop token (stop_token_ids)
    eos_bias: float = 0.0  # logit bias on EOS: 100 makes EOS the first token


CASES = [
    Case("length", max_tokens=5),
    Case("eos-before-max", max_tokens=4, eos_bias=100.0),
    Case("eos-exactly-at-max", max_tokens=1, eos_bias=100.0),
    Case("stop-token-before-max", max_tokens=6, stop_at=2),
    Case("stop-token-exactly-at-max", max_tokens=3, stop_at=2),
]


@pytest.fixture(scope="module")
def prompt(llm: Any) -> list[int]:
    messages = [{"role": "user", "content": "Guess the number between 1 and 16."}]
    return list(
        llm.get_tokenizer().apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"]
    )


@pytest.fixture(scope="module")
def free_run(llm: Any, prompt: list[int]) -> list[int]:
    """The greedy continuation with nothing stopping it (custom stop tokens are picked from it)."""
    from vllm import SamplingParams, TokensPrompt

    out = llm.generate([TokensPrompt(prompt_token_ids=prompt)], SamplingParams(temperature=0, max_tokens=8))
    return list(out[0].outputs[0].token_ids)


def _stop_ids(case: Case, free_run: list[int]) -> list[int]:
    if case.stop_at is None:
        return []
    token = free_run[case.stop_at]
    assert token not in free_run[: case.stop_at], "pick a position whose token is new"
    return [token]


def _real(llm: Any, prompt: list[int], case: Case, free_run: list[int]) -> Any:
    from vllm import SamplingParams, TokensPrompt

    eos = int(llm.get_tokenizer().eos_token_id)
    params = SamplingParams(
        temperature=0,
        max_tokens=case.max_tokens,
        stop_token_ids=_stop_ids(case, free_run) or None,
        logit_bias={eos: case.eos_bias} if case.eos_bias else None,
        logprobs=0,
    )
    return llm.generate([TokensPrompt(prompt_token_ids=prompt)], params, use_tqdm=False)[0]


def _load(name: str, path: Path, package: bool = False) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        name, path / "__init__.py" if package else path, submodule_search_locations=[str(path)] if package else None
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def oat_vllm() -> Any:
    """oat's stand-in package (it is named ``vllm``): loaded with the real vLLM moved aside, then put back."""
    names = ["vllm", "vllm.outputs", "vllm.sequence", "vllm.lora", "vllm.lora.request"]
    real = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    try:
        return _load("vllm", OAT_VLLM, package=True)
    finally:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(real)


@pytest.fixture(scope="module")
def openrlhf_standins() -> Any:
    return _load("gem_openrlhf_test_standins", OPENRLHF_STANDINS)


def _steps(completion: Any, ranks: bool, decoded: list[bool]) -> list[tuple[int | None, str | None, int]]:
    """Per step: the sampled token's rank and decoded text (where asked), and how many entries the step holds."""
    return [
        (step[token].rank if ranks else None, step[token].decoded_token if whole else None, len(step))
        for step, token, whole in zip(completion.logprobs, completion.token_ids, decoded, strict=True)
    ]


def _sampled_entries(completion: Any) -> list[Any]:
    return [step[token] for step, token in zip(completion.logprobs, completion.token_ids, strict=True)]


def _sampled_logprobs(completion: Any) -> list[float]:
    return [entry.logprob for entry in _sampled_entries(completion)]


def _assert_same(stand_in: Any, real: Any, case: Case, *, stop_at_max_is_length: bool = False) -> None:
    assert list(stand_in.token_ids) == list(real.token_ids)
    if stop_at_max_is_length and real.finish_reason == "stop" and len(real.token_ids) == case.max_tokens:
        # vLLM 0.8's V1 scheduler tested the length cap before the stop token: a cut, whose text keeps that token
        assert (stand_in.finish_reason, stand_in.stop_reason) == ("length", None)
        assert stand_in.text.startswith(real.text)
    else:
        assert stand_in.text == real.text
        assert stand_in.finish_reason == real.finish_reason
        assert stand_in.stop_reason == real.stop_reason
    assert _sampled_logprobs(stand_in) == pytest.approx(_sampled_logprobs(real))
    # logprobs=0: the sampled token alone. Its rank is 1 under greedy decoding; the stand-ins say 1 always,
    # while vLLM ranks the raw distribution (before the logit bias that forces EOS here): not compared then.
    ranks = not case.eos_bias
    # A token holding part of a multi-byte character: vLLM gives it "" and the completing token the whole
    # character (decoded with the tokens before it); the stand-ins decode each token alone. Not compared there.
    whole = [bool(s.decoded_token) and "\ufffd" not in s.decoded_token for s in _sampled_entries(stand_in)]
    assert _steps(stand_in, ranks, whole) == _steps(real, ranks, whole)
    assert stand_in.cumulative_logprob == pytest.approx(real.cumulative_logprob)


def _policy_ids(real: Any) -> tuple[list[int], list[float]]:
    ids = [*real.token_ids, *AFTER_STOP]
    logprobs = [step[t].logprob for step, t in zip(real.logprobs, real.token_ids, strict=True)]
    return ids, [*logprobs, *[-1.0] * len(AFTER_STOP)]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_oat_standin_answers_like_vllm(
    llm: Any, prompt: list[int], free_run: list[int], model_dir: Path, oat_vllm: Any, case: Case
) -> None:
    """oat's stand-in (vLLM 0.8.4's offline ``LLM``) applies the stop rules itself to its model's tokens."""
    real = _real(llm, prompt, case, free_run).outputs[0]
    oat_vllm.register_policy(str(model_dir), lambda ids: _policy_ids(real))
    stand_in_llm = oat_vllm.LLM(model=str(model_dir))
    params = oat_vllm.SamplingParams(
        temperature=0, max_tokens=case.max_tokens, stop_token_ids=_stop_ids(case, free_run) or None, logprobs=0
    )
    out = stand_in_llm.generate(prompt_token_ids=[prompt], sampling_params=params, use_tqdm=False)[0].outputs[0]
    _assert_same(out, real, case, stop_at_max_is_length=True)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_openrlhf_standin_answers_like_vllm(
    llm: Any, prompt: list[int], free_run: list[int], openrlhf_standins: Any, case: Case
) -> None:
    """OpenRLHF's stand-in (vLLM 0.29's ``AsyncLLMEngine``) builds the outputs from its policy's generation."""
    import asyncio

    real_output = _real(llm, prompt, case, free_run)
    real = real_output.outputs[0]
    ids, logprobs = _policy_ids(real)
    n = len(real.token_ids)
    reply = Generation(token_ids=ids[:n], logprobs=logprobs[:n], finish_reason=real.finish_reason)
    engine = openrlhf_standins.StandInLLM(llm.get_tokenizer(), lambda prompt_ids, max_tokens: reply)
    params = openrlhf_standins.SamplingParams(temperature=0, max_tokens=case.max_tokens, logprobs=0)

    async def run() -> Any:
        outputs = [o async for o in engine.generate({"prompt_token_ids": prompt}, params, "r0")]
        return outputs[-1]

    final = asyncio.run(run())
    assert final.finished and list(final.prompt_token_ids) == list(real_output.prompt_token_ids)
    _assert_same(final.outputs[0], real, case)


def test_field_names_the_adapters_read_exist_on_the_real_classes(openrlhf_standins: Any, oat_vllm: Any) -> None:
    from vllm.logprobs import Logprob
    from vllm.outputs import CompletionOutput, RequestOutput

    completion = {"index", "text", "token_ids", "cumulative_logprob", "logprobs", "finish_reason", "stop_reason"}
    request = {"request_id", "prompt", "prompt_token_ids", "outputs", "finished"}
    real_completion = set(CompletionOutput.__dataclass_fields__)
    assert completion <= real_completion
    real_request = RequestOutput(
        request_id="r", prompt=None, prompt_token_ids=[1], prompt_logprobs=None, outputs=[], finished=True
    )
    assert all(hasattr(real_request, name) for name in request)
    assert {"logprob", "rank", "decoded_token"} <= set(Logprob.__dataclass_fields__)
    for module in (openrlhf_standins, oat_vllm.outputs):
        assert completion <= set(module.CompletionOutput.__dataclass_fields__)


def test_bad_sampling_params_raise_vllm_validation_error() -> None:
    """0.32 refuses bad values when ``SamplingParams`` is built, with its own error type (not a ``ValueError``)."""
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    for bad in ({"max_tokens": 0}, {"temperature": -1.0}, {"top_p": 0.0}):
        with pytest.raises(VLLMValidationError):
            SamplingParams(**bad)
    assert not issubclass(VLLMValidationError, ValueError)
    assert SamplingParams().top_k == 0  # 0 (and -1, still accepted) mean "no top-k"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cut_at_stop_answers_like_vllm(llm: Any, prompt: list[int], free_run: list[int], case: Case) -> None:
    """``gem_core.episode.cut_at_stop`` (the hf backend's stop rule over ``model.generate``'s raw ids) is vLLM's."""
    from gem_core.episode import cut_at_stop

    real = _real(llm, prompt, case, free_run).outputs[0]
    raw_ids, raw_logprobs = _policy_ids(real)  # what a model with no stop rule would have sampled
    stops = {int(llm.get_tokenizer().eos_token_id), *_stop_ids(case, free_run)}
    mine = cut_at_stop(raw_ids[: case.max_tokens], stops, case.max_tokens, raw_logprobs[: case.max_tokens])
    assert mine.token_ids == list(real.token_ids)
    assert mine.finish_reason == real.finish_reason
    assert mine.logprobs == pytest.approx(_sampled_logprobs(real))
