"""What the capture gateway adds: latency per call and throughput, next to calling the generate function directly.

The generate function is the same in both modes and as cheap as possible (it returns a
reply of ``--reply-tokens`` ids precomputed per turn, after ``--engine-ms`` of simulated
engine time), so what differs is what the gateway costs: the HTTP round trip over loopback,
JSON, the session table, the token bridge of each call's new messages (a chat-template
render and an encode), the tool parser and the decode of the reply.

* ``direct``: each session is a coroutine that calls ``generate(TurnRequest)`` ``--turns``
  times, its prompt growing by the reply and a bridge each turn, as the episode engine does
  (a call's latency includes its bridge);
* ``gateway``: each session is a harness that posts ``/s/<session>/v1/chat/completions``
  (aiohttp client, one connection per session) with its whole history, ``--turns`` times;
  the gateway serves in another process (its own event loop and core, as in deployment).

Reported per mode and concurrency (``--sessions``: 64 and 512 sessions at once): median and
p90 latency per call, calls/s over the run, and the gateway's added median latency and
throughput ratio; each the median of ``--repeats`` runs. The machine's load moves the
numbers; run both modes in the same call, and compare only numbers from one run.

    python bench/gateway.py --sessions 64 512 --turns 4 --repeats 3 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gem_core.episode import Generation, TurnRequest

QUESTION = "Find the secret number between 1 and 100. Answer with a number."
OBSERVATION = "Wrong: the number is higher. Try again."


def tokenizer() -> Any:
    from gem_core.testing_tokenizers import build_chat_tokenizer

    return build_chat_tokenizer("chatml_tools")


class CheapEngine:
    """A generate function answering turn ``t`` with precomputed ids after ``engine_ms`` (simulated engine time)."""

    def __init__(self, tok: Any, reply_tokens: int, engine_ms: float) -> None:
        self.engine_s = engine_ms / 1000
        text = "My guess is 50. " * (reply_tokens // 4 + 1)
        ids = tok.encode(text, add_special_tokens=False)[: reply_tokens - 1]
        self.ids = [*ids, tok.eos_token_id]

    async def __call__(self, request: TurnRequest) -> Generation:
        if self.engine_s:
            await asyncio.sleep(self.engine_s)
        return Generation(token_ids=list(self.ids), logprobs=[-0.5] * len(self.ids), finish_reason="stop")


def _serve(port: int, reply_tokens: int, engine_ms: float) -> None:
    from gem_gateway.capture import Gateway, GatewayLimits
    from gem_gateway.server import serve

    tok = tokenizer()
    limits = GatewayLimits(max_sessions=100_000, max_concurrent_generations=4096, closed_keys_kept=1_000_000)
    gateway = Gateway(CheapEngine(tok, reply_tokens, engine_ms), tok, model_name="bench", limits=limits)

    async def forever() -> None:
        async with serve(gateway, "127.0.0.1", port):
            await asyncio.Event().wait()

    asyncio.run(forever())


async def _direct(engine: CheapEngine, tok: Any, sessions: int, turns: int) -> tuple[list[float], float]:
    from gem_core.chat import ChatRenderer

    renderer = ChatRenderer(tok)
    latencies: list[float] = []

    async def one(index: int) -> None:
        prompt = renderer.prompt_ids([{"role": "user", "content": QUESTION}])
        generation = Generation()
        for turn in range(turns):
            started = time.perf_counter()
            if turn:  # the engine's own per-turn work: the bridge of the new message
                ids = generation.token_ids or []
                prompt += [*ids, *renderer.bridge_ids([{"role": "user", "content": OBSERVATION}], ids)]
            generation = await engine(TurnRequest(index, turn, list(prompt), [], 64, request_id=f"{index}/{turn}"))
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(sessions)))
    return latencies, time.perf_counter() - started


async def _through(url: str, run: str, sessions: int, turns: int) -> tuple[list[float], float]:
    import aiohttp

    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:

        async def one(index: int) -> None:
            messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
            for _ in range(turns):
                started = time.perf_counter()
                async with http.post(
                    f"{url}/s/{run}-{index}/v1/chat/completions",
                    json={"model": "bench", "messages": messages, "max_tokens": 64},
                ) as response:
                    body = await response.json()
                latencies.append(time.perf_counter() - started)
                if response.status != 200:
                    raise RuntimeError(f"gateway answered {response.status}: {body}")
                reply = body["choices"][0]["message"]
                messages += [
                    {"role": "assistant", "content": reply["content"]},
                    {"role": "user", "content": OBSERVATION},
                ]

        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(sessions)))
    return latencies, time.perf_counter() - started


def _summary(latencies: list[float], seconds: float) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "median_ms": 1000 * statistics.median(ordered),
        "p90_ms": 1000 * ordered[int(0.9 * (len(ordered) - 1))],
        "calls_per_s": len(ordered) / seconds,
    }


def run(sessions: list[int], turns: int, repeats: int, reply_tokens: int, engine_ms: float) -> dict[str, Any]:
    """Both modes at each concurrency; the median of ``repeats`` runs of each figure."""
    from gem_core.testing_servers import free_port, serve_until_healthy

    tok = tokenizer()
    engine = CheapEngine(tok, reply_tokens, engine_ms)
    port = free_port()
    command = [sys.executable, __file__, "--serve", str(port), "--reply-tokens", str(reply_tokens)]
    command += ["--engine-ms", str(engine_ms)]
    results: dict[str, Any] = {
        "turns": turns,
        "reply_tokens": reply_tokens,
        "engine_ms": engine_ms,
        "repeats": repeats,
        "rows": [],
    }
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "gateway.log"
        with serve_until_healthy(command, f"http://127.0.0.1:{port}/health", log, timeout_s=180):
            url = f"http://127.0.0.1:{port}"
            for count in sessions:
                runs: dict[str, list[dict[str, float]]] = {"direct": [], "gateway": []}
                for repeat in range(repeats):
                    runs["direct"].append(_summary(*asyncio.run(_direct(engine, tok, count, turns))))
                    through = asyncio.run(_through(url, f"r{count}x{repeat}", count, turns))
                    runs["gateway"].append(_summary(*through))
                row: dict[str, Any] = {"sessions": count}
                for mode, figures in runs.items():
                    row[mode] = {k: statistics.median(f[k] for f in figures) for k in figures[0]}
                row["added_median_ms"] = row["gateway"]["median_ms"] - row["direct"]["median_ms"]
                row["throughput_ratio"] = row["gateway"]["calls_per_s"] / row["direct"]["calls_per_s"]
                results["rows"].append(row)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reply-tokens", type=int, default=32)
    parser.add_argument("--engine-ms", type=float, default=0.0, help="simulated engine time per call")
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)  # the gateway's own process
    args = parser.parse_args(argv)
    if args.serve:
        _serve(args.serve, args.reply_tokens, args.engine_ms)
        return 0
    results = run(args.sessions, args.turns, args.repeats, args.reply_tokens, args.engine_ms)
    for row in results["rows"]:
        d, g = row["direct"], row["gateway"]
        print(
            f"{row['sessions']:>4} sessions: direct {d['median_ms']:.2f} ms/call {d['calls_per_s']:.0f} calls/s | "
            f"gateway {g['median_ms']:.2f} ms/call (p90 {g['p90_ms']:.2f}) {g['calls_per_s']:.0f} calls/s | "
            f"added {row['added_median_ms']:.2f} ms, throughput x{row['throughput_ratio']:.3f}"
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
