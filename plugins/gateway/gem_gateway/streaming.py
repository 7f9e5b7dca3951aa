"""A streaming engine: a transformers causal LM sampled token by token, each id sent as it is drawn.

:class:`TransformersStreamer` is both of the gateway's engine interfaces: called as a stream
(``Gateway(stream_generate=streamer)``) it yields a :class:`~gem_gateway.capture.TokenDelta`
per sampled id; its :meth:`~TransformersStreamer.generate` answers a whole reply
(``Gateway(streamer.generate, ...)``). Sampling runs in a worker thread (one per request, the
KV cache kept across steps); closing the stream early sets a flag that the thread checks
before every step, so a client that goes away ends its request after at most one more step.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from gem_core.episode import Generation, TurnRequest
from gem_gateway.capture import TokenDelta
from gem_gateway.errors import BadRequest, GenerateFailed

#: How long a finished stream waits for its sampling thread to count itself out.
_THREAD_END_S = 10.0

__all__ = ["TransformersStreamer"]


class TransformersStreamer:
    """Sample a transformers causal LM one token at a time (CPU or GPU), streaming each id.

    Each id's logprob is taken under the distribution it was drawn from (after temperature
    and top-p), as gem eval's ``hf`` backend records it.

    Args:
        model: A loaded ``transformers`` causal LM (``.eval()`` is applied).
        stop_ids: Ids that end a reply (the model's and the tokenizer's eos).
        temperature: 0 is greedy.
        top_p: Nucleus sampling mass.
        seed: Base seed; request ``turn`` is added, so a request samples the same ids each time.
        max_tokens: Tokens per reply when the request names no limit.

    Raises:
        BadRequest: a temperature below 0, top_p outside (0, 1], no stop id, max_tokens below 1.
    """

    def __init__(
        self,
        model: Any,
        stop_ids: Iterable[int],
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        max_tokens: int = 256,
    ) -> None:
        import torch

        self._torch = torch
        self.model = model.eval()
        self.stop_ids = frozenset(int(i) for i in stop_ids)
        if not self.stop_ids:
            raise BadRequest("TransformersStreamer needs at least one stop id (the eos token's)")
        if temperature < 0 or not 0 < top_p <= 1 or max_tokens < 1:
            raise BadRequest(
                f"TransformersStreamer needs temperature >= 0, 0 < top_p <= 1 and max_tokens >= 1; got "
                f"{temperature}, {top_p}, {max_tokens}"
            )
        self.temperature, self.top_p, self.seed, self.max_tokens = temperature, top_p, seed, max_tokens
        # the KV cache's argument and output field: ``cache`` in transformers 5.2x, ``past_key_values`` before
        forward = inspect.signature(self.model.forward).parameters
        self._cache_name = "cache" if "cache" in forward else "past_key_values"
        self._lock = threading.Lock()
        #: Sampling threads still running (a closed stream's thread ends after at most one step).
        self.running = 0

    def __call__(self, request: TurnRequest) -> AsyncIterator[TokenDelta]:
        """Stream ``request``'s reply: one :class:`TokenDelta` per sampled id, the last with its finish reason."""
        return self._stream(request)

    async def generate(self, request: TurnRequest) -> Generation:
        """The whole reply at once (a plain gem generate function over the same sampler)."""
        ids: list[int] = []
        logprobs: list[float] = []
        finish = "stop"
        async for delta in self._stream(request):
            ids.extend(delta.token_ids)
            logprobs.extend(delta.logprobs or ())
            finish = delta.finish_reason or finish
        return Generation(token_ids=ids, logprobs=logprobs, finish_reason=finish)

    async def _stream(self, request: TurnRequest) -> AsyncIterator[TokenDelta]:
        prompt = list(request.prompt_ids or [])
        if not prompt:
            raise BadRequest("TransformersStreamer needs the request's prompt ids (token mode)")
        limit = request.max_tokens or self.max_tokens
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[TokenDelta | BaseException] = asyncio.Queue()
        cancelled = threading.Event()
        ended = asyncio.Event()

        def put(item: TokenDelta | BaseException | None) -> None:
            if not loop.is_closed():  # None: the thread is done (``running`` counts it out)
                loop.call_soon_threadsafe(ended.set if item is None else functools.partial(queue.put_nowait, item))

        with self._lock:
            self.running += 1
        thread = threading.Thread(
            target=self._sample,
            args=(prompt, limit, self.seed + request.turn, cancelled, put),
            name=f"gem-gateway-stream-{request.request_id}",
            daemon=True,
        )
        thread.start()
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise GenerateFailed(f"the model failed while sampling: {type(item).__name__}: {item}") from item
                if item.finish_reason is not None:
                    # The last id is put just before the thread ends: wait for that, so a finished stream
                    # leaves no sampling thread (bounded: nothing is left for it to do but count itself out).
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(ended.wait(), _THREAD_END_S)
                    yield item
                    return
                yield item
        finally:
            cancelled.set()  # the thread stops before its next step

    def _sample(
        self,
        prompt: list[int],
        limit: int,
        seed: int,
        cancelled: threading.Event,
        put: Callable[[TokenDelta | BaseException | None], None],
    ) -> None:
        torch = self._torch
        try:
            generator = torch.Generator().manual_seed(seed)
            inputs = torch.tensor([prompt], device=self.model.device)
            past = None
            with torch.no_grad():
                for step in range(limit):
                    if cancelled.is_set():
                        return
                    out = self.model(input_ids=inputs, use_cache=True, **{self._cache_name: past})
                    past = out[self._cache_name]
                    token, logprob = self._draw(out.logits[0, -1].float(), generator)
                    finish = "stop" if token in self.stop_ids else "length" if step == limit - 1 else None
                    put(TokenDelta(token_ids=[token], logprobs=[logprob], finish_reason=finish))
                    if finish is not None:
                        return
                    inputs = torch.tensor([[token]], device=self.model.device)
        except Exception as exc:  # reaches the stream's reader as a GenerateFailed
            put(exc)
        finally:
            with self._lock:
                self.running -= 1
            put(None)

    def _draw(self, logits: Any, generator: Any) -> tuple[int, float]:
        torch = self._torch
        if self.temperature <= 0:
            token = int(logits.argmax())
            return token, float(logits.log_softmax(-1)[token])
        scores = logits / self.temperature
        if self.top_p < 1:
            ordered, order = scores.sort(descending=True)
            mass = ordered.softmax(-1).cumsum(-1)
            drop = mass - ordered.softmax(-1) >= self.top_p  # keep the smallest head holding top_p
            scores = scores.clone()
            scores[order[drop]] = -float("inf")
        logprobs = scores.log_softmax(-1)
        token = int(torch.multinomial(logprobs.exp().cpu(), 1, generator=generator))
        return token, float(logprobs[token])
