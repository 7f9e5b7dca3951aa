"""The only fakes of the RL2 tests: the SGLang inference server and the import names of GPU-only packages.

* :class:`StandInSGLang` is an HTTP server on localhost answering SGLang 0.5's
  ``POST /generate`` (``input_ids`` + ``sampling_params`` + ``return_logprob``) the way
  SGLang does: ``text`` decoded with ``skip_special_tokens`` (default true) after
  trimming the matched stop token unless ``no_stop_trim``; ``output_ids``;
  ``meta_info`` with ``id``, ``finish_reason`` as SGLang's ``to_json`` writes it
  (``{"type": "stop", "matched": <token id>}``, ``{"type": "length", "length": max_new_tokens}``,
  ``{"type": "abort", "message", "status_code", "err_type"}``), decided in SGLang's order
  (abort, then length, then the stop token), ``prompt_tokens``, ``completion_tokens``,
  ``cached_tokens``, ``e2e_latency``, ``input_token_logprobs`` (the last prompt token,
  as with the default ``logprob_start_len``) and ``output_token_logprobs``
  (``[logprob, token_id, None]`` per generated token, the stop token included). Its
  "model" is a policy function of the prompt ids. It also answers the memory
  endpoints RL2 calls between rollouts.
* :func:`install_gpu_import_standins` registers module names that RL2 0.0.2 imports at
  module level but only uses on a GPU (SGLang's server/launch code, ring-flash-attn's
  kernels), so RL2's real ``workers.rollout`` and ``trainer.ppo`` import on the CPU.
  Every function in them raises if called: the tests never reach them.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import types
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gem_core.episode import Generation

#: ``policy(input_ids, max_new_tokens) -> Generation`` (ids with the stop token when it stopped).
Policy = Callable[[list[int], "int | None"], Generation]


class StandInSGLang:
    """A localhost server speaking SGLang's ``/generate`` for a policy function; use as a context manager."""

    def __init__(self, tokenizer: Any, policy: Policy, *, ignore_skip_special_tokens: bool = False) -> None:
        self.tokenizer = tokenizer
        self.policy = policy
        # Decode as if skip_special_tokens were left at SGLang's default (true), whatever the request says.
        self.ignore_skip_special_tokens = ignore_skip_special_tokens
        self.requests: list[dict[str, Any]] = []
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="standin-sglang", daemon=True)
        self._runner: web.AppRunner | None = None

    def __enter__(self) -> StandInSGLang:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/generate", self._generate)
        for endpoint in ("release_memory_occupation", "resume_memory_occupation", "flush_cache"):
            app.router.add_post(f"/{endpoint}", self._ok)
        app.router.add_get("/health_generate", self._ok)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def _ok(self, request: web.Request) -> web.Response:
        return web.json_response({"success": True})

    async def _generate(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        payload = await request.json()
        self.requests.append(payload)
        input_ids = [int(i) for i in payload["input_ids"]]
        params = payload.get("sampling_params") or {}
        limit = params.get("max_new_tokens")
        gen = self.policy(input_ids, limit)
        ids = list(gen.token_ids or [])
        logprobs = list(gen.logprobs or [0.0] * len(ids))
        text_ids = ids
        # SGLang's Req.check_finished order: an abort, then the length (so a stop token that is the
        # last one allowed reports "length"), then the stop token; to_json's fields for each.
        if gen.finish_reason == "abort":
            finish: dict[str, Any] = {
                "type": "abort",
                "message": "Abort before prefill" if not ids else "Aborted",
                "status_code": None,
                "err_type": None,
            }
        elif limit is not None and len(ids) >= limit:
            finish = {"type": "length", "length": limit}
        elif gen.finish_reason == "stop":
            finish = {"type": "stop", "matched": ids[-1]}
            text_ids = ids if params.get("no_stop_trim", False) else ids[:-1]
        else:  # a cut the policy made short of the limit: SGLang cuts only at max_new_tokens
            raise AssertionError(f"the policy cut at {len(ids)} tokens, below max_new_tokens={limit}")
        skip = True if self.ignore_skip_special_tokens else params.get("skip_special_tokens", True)
        text = self.tokenizer.decode(text_ids, skip_special_tokens=skip)
        meta = {
            "id": uuid.uuid4().hex,
            "finish_reason": finish,
            "prompt_tokens": len(input_ids),
            "completion_tokens": len(ids),
            "cached_tokens": 0,
            "e2e_latency": time.perf_counter() - started,
        }
        if payload.get("return_logprob"):
            meta["input_token_logprobs"] = [[None, input_ids[-1], None]]
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(logprobs, ids, strict=True)]
        return web.json_response({"text": text, "output_ids": ids, "meta_info": meta})


def _gpu_only(name: str) -> Callable[..., Any]:
    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{name} is a GPU-only stand-in in the CPU tests; nothing here should call it")

    return unavailable


class _GpuOnlyClass:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"{type(self).__name__} is a GPU-only stand-in in the CPU tests")


_GPU_IMPORTS: dict[str, list[str]] = {
    "sglang": [],
    "sglang.srt": [],
    "sglang.srt.utils": ["MultiprocessingSerializer"],
    "sglang.srt.model_executor": [],
    "sglang.srt.model_executor.model_runner": ["LocalSerializedTensor"],
    "sglang.srt.patch_torch": ["monkey_patch_torch_reductions"],
    "sglang.srt.server_args": ["ServerArgs"],
    "sglang.srt.entrypoints": [],
    "sglang.srt.entrypoints.http_server": ["launch_server"],
    "sglang_router": [],
    "sglang_router.launch_router": ["RouterArgs", "launch_router"],
    "ring_flash_attn": [],
    "ring_flash_attn.llama3_flash_attn_varlen": [
        "llama3_flash_attn_varlen_func",
        "llama3_flash_attn_prepare_cu_seqlens",
    ],
    "ring_flash_attn.adapters": [],
    "ring_flash_attn.adapters.hf_adapter": ["flash_attention_forward"],
}


def install_gpu_import_standins() -> None:
    """Register the GPU-only modules RL2 0.0.2 imports (only where the real ones are not installed)."""
    for module_name, names in _GPU_IMPORTS.items():
        root = module_name.split(".")[0]
        if root in sys.modules and not getattr(sys.modules[root], "__gem_standin__", False):
            continue
        module = sys.modules.get(module_name) or types.ModuleType(module_name)
        module.__gem_standin__ = True  # type: ignore[attr-defined]
        module.__path__ = []  # type: ignore[attr-defined]
        for name in names:
            kind = _GpuOnlyClass if name[0].isupper() else None
            value = type(name, (kind,), {}) if kind else _gpu_only(f"{module_name}.{name}")
            setattr(module, name, value)
        sys.modules[module_name] = module
        parent, _, child = module_name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)
