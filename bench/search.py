"""Search tool throughput: BM25 index build/load, raw scoring, and the tool's queries per second.

Run: ``python bench/search.py [--docs 20000] [--repeats 5]`` (needs ``pip install -e . -e plugins/search``).
Side by side in one run, medians over ``--repeats``:

* BM25 build and cache load on the shipped demo corpus and on a synthetic Zipf corpus;
* raw scoring (``BM25Index.search``) against ``rank_bm25`` (PyPI), when installed, on the same
  corpus, tokens and parameters: the usual pure-Python BM25;
* the ``search`` tool, one query at a time and 256 concurrent queries (batched);
* the HTTP backend against ``gem_tool_search.server`` (Search-R1's protocol) on 127.0.0.1, with
  batching on (``max_batch_size=64``) and off (``max_batch_size=1``, one POST per query as GEM's
  client does).

GEM's own search tool needs a dense-retrieval or SerpAPI server and speaks msgpack to mosec,
so there is no same-work comparison with ``gem-llm`` here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gem_tool_search import BM25Index, SearchTool, demo_corpus_path, tokenize
from gem_tool_search.server import RetrievalServer


def median_time(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def synthetic_corpus(path: Path, n_docs: int, seed: int = 0) -> list[str]:
    """Zipf-distributed pseudo-words (like natural text), 40-120 tokens per doc; returns queries."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}x" for i in range(50_000)]
    with path.open("w") as handle:
        for i in range(n_docs):
            ids = np.minimum(rng.zipf(1.3, size=int(rng.integers(40, 120))), len(vocab)) - 1
            handle.write(
                json.dumps({"id": str(i), "title": f"doc {i}", "text": " ".join(vocab[j] for j in ids)}) + "\n"
            )
    return [" ".join(vocab[j] for j in np.minimum(rng.zipf(1.3, size=4), len(vocab)) - 1) for _ in range(200)]


def bench_index(name: str, corpus: Path, queries: list[str], repeats: int, rows: list[tuple[str, str]]) -> BM25Index:
    with tempfile.TemporaryDirectory() as cache:
        build = median_time(lambda: BM25Index.build(corpus), repeats)
        BM25Index.load_or_build(corpus, cache_dir=Path(cache))
        load = median_time(lambda: BM25Index.load_or_build(corpus, cache_dir=Path(cache)), repeats)
    index = BM25Index.build(corpus)
    rows.append((f"{name}: build index ({index.n_docs} docs)", f"{build * 1e3:.1f} ms"))
    rows.append((f"{name}: load cached index (hash + np.load)", f"{load * 1e3:.1f} ms ({build / load:.1f}x faster)"))
    ours = median_time(lambda: [index.search(q, 3) for q in queries], repeats)
    rows.append((f"{name}: BM25Index.search, top-3", f"{len(queries) / ours:,.0f} q/s"))
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        rows.append((f"{name}: rank_bm25", "not installed (pip install rank_bm25)"))
        return index
    docs = [f"{d['title']} {d['text']}" for d in map(json.loads, corpus.read_text().splitlines())]
    reference = BM25Okapi([tokenize(d) for d in docs], k1=0.9, b=0.4)
    tokenized = [tokenize(q) for q in queries]
    theirs = median_time(lambda: [np.argsort(reference.get_scores(t))[-3:] for t in tokenized], max(1, repeats // 2))
    rows.append(
        (f"{name}: rank_bm25 BM25Okapi, top-3", f"{len(queries) / theirs:,.0f} q/s (ours {theirs / ours:.1f}x)")
    )
    return index


def bench_tool(label: str, tool: SearchTool, queries: list[str], repeats: int, rows: list[tuple[str, str]]) -> None:
    async def sequential() -> None:
        for q in queries:
            await tool.execute({"query": q})

    async def concurrent() -> None:
        await asyncio.gather(*(tool.execute({"query": q}) for q in queries))

    asyncio.run(sequential())  # warm up: index load, connection
    seq = median_time(lambda: asyncio.run(sequential()), repeats)
    batches_before = tool.batches_sent
    conc = median_time(lambda: asyncio.run(concurrent()), repeats)
    per_run = (tool.batches_sent - batches_before) / repeats
    rows.append((f"{label}: one call at a time", f"{len(queries) / seq:,.0f} q/s"))
    rows.append(
        (f"{label}: {len(queries)} concurrent calls", f"{len(queries) / conc:,.0f} q/s ({per_run:.0f} backend calls)")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=20_000, help="synthetic corpus size")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows: list[tuple[str, str]] = []

    demo_queries = [
        json.loads(line)["title"] + " capital history" for line in demo_corpus_path().read_text().splitlines()
    ][:256]
    bench_index("demo corpus", demo_corpus_path(), demo_queries, args.repeats, rows)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "synthetic.jsonl"
        synth_queries = synthetic_corpus(corpus, args.docs)
        big = bench_index("synthetic corpus", corpus, synth_queries, args.repeats, rows)

        with tempfile.TemporaryDirectory() as cache:
            tool = SearchTool(corpus=corpus, cache_dir=Path(cache))
            bench_tool("search tool, BM25, synthetic", tool, (synth_queries * 2)[:256], args.repeats, rows)
            tool.close()

        server = RetrievalServer(big).start()
        for label, batch in [("batched", 64), ("unbatched", 1)]:
            tool = SearchTool(backend="http", url=server.url, max_batch_size=batch)
            bench_tool(f"search tool, HTTP {label}", tool, (synth_queries * 2)[:256], args.repeats, rows)
            tool.close()
        server.close()

    width = max(len(name) for name, _ in rows)
    print(f"{'measurement':<{width}}  median of {args.repeats}")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
