"""The ``gem gateway`` command: serve a local model (``hf`` or ``vllm`` backend) as the capture gateway.

gem-gateway's plugin declares it through gem's ``register_commands`` hook; gem's CLI imports
this module only when the command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import TYPE_CHECKING

from gem_core.errors import ConfigError

if TYPE_CHECKING:
    from gem_core.cli import Streams

__all__ = ["ADMIN_TOKEN_VARIABLE", "gateway_arguments", "run_gateway"]

#: The environment variable holding the admin token (kept off the command line, out of ``ps``).
ADMIN_TOKEN_VARIABLE = "GEM_GATEWAY_ADMIN_TOKEN"


def gateway_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``gem gateway``."""
    from gem_gateway.capture import GatewayLimits

    d = GatewayLimits()
    p.add_argument("model", help="a local model folder (or a hub id where the hub is reachable)")
    p.add_argument("--backend", choices=["hf", "vllm"], default="hf", help="the generate function behind the API")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--tool-parser",
        default="auto",
        help="the model family's tool-call format: auto (read off the chat template), hermes, qwen, llama3_json, none",
    )
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of the engine (0: greedy)")
    p.add_argument("--max-sessions", type=int, default=d.max_sessions)
    p.add_argument("--max-calls-per-session", type=int, default=d.max_calls_per_session)
    p.add_argument(
        "--request-timeout", type=float, default=d.request_timeout_s, help="seconds per call, queue included"
    )
    p.add_argument(
        "--max-tokens", type=int, default=d.default_max_tokens, help="tokens per call when a request names none"
    )
    p.add_argument(
        "--max-context", type=int, default=d.max_context_tokens, help="prompt plus generated tokens per call"
    )


def run_gateway(args: argparse.Namespace, streams: Streams) -> int:
    """``gem gateway``: serve until interrupted; admin routes on only with ``$GEM_GATEWAY_ADMIN_TOKEN``."""
    from gem_core.eval.backends import Sampling, make_backend
    from gem_gateway.capture import Gateway, GatewayLimits
    from gem_gateway.server import serve

    limits = GatewayLimits(
        max_sessions=args.max_sessions,
        max_calls_per_session=args.max_calls_per_session,
        request_timeout_s=args.request_timeout,
        default_max_tokens=args.max_tokens,
        max_tokens_cap=max(args.max_tokens, min(8192, args.max_context)),
        max_context_tokens=args.max_context,
    )
    sampling = Sampling(temperature=args.temperature, max_tokens=args.max_tokens, seed=None)
    backend = make_backend(args.backend, args.model, sampling=sampling)
    if backend.tokenizer is None:
        raise ConfigError(f"the {args.backend} backend has no tokenizer; the gateway needs token ids")

    async def generate(request):  # type: ignore[no-untyped-def]
        return await backend.generate(request, request.request_id)

    gateway = Gateway(generate, backend.tokenizer, model_name=args.model, tool_parser=args.tool_parser, limits=limits)
    token = os.environ.get(ADMIN_TOKEN_VARIABLE) or None

    async def main() -> None:
        async with serve(gateway, args.host, args.port, admin_token=token) as url:
            streams.out.write(f"gem gateway: {url}/s/<session>/v1 (admin routes {'on' if token else 'off'})\n")
            streams.out.flush()
            await asyncio.Event().wait()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        return 0
    return 0
