"""Tool benchmarks, side by side with GEM (``gem-llm``) where GEM has the same tool.

Run: ``python bench/tools.py [--sections python] [--calls 200] [--concurrency 8] [--json out.json]``.

Each section is a function registered in ``SECTIONS`` that returns rows
``{"section", "impl", "metric", "value", "unit"}`` plus notes; add a section by writing one
more function and decorating it with ``@section("name")``. Numbers are medians/percentiles
of one run; compare ratios between implementations measured in the same run, not absolute
values across machines.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

Row = dict[str, Any]


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, section: str, impl: str, metric: str, value: float, unit: str) -> None:
        self.rows.append({"section": section, "impl": impl, "metric": metric, "value": value, "unit": unit})


SECTIONS: dict[str, Callable[[argparse.Namespace, Report], None]] = {}


def section(name: str) -> Callable[[Callable[[argparse.Namespace, Report], None]], Callable[..., None]]:
    def register(fn: Callable[[argparse.Namespace, Report], None]) -> Callable[..., None]:
        SECTIONS[name] = fn
        return fn

    return register


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def latency_and_throughput(
    call: Callable[[], Any], calls: int, concurrency: int, warmup: int = 5
) -> tuple[list[float], float]:
    """Per-call latencies of ``calls`` sequential calls, then calls/s with ``concurrency`` threads."""
    for _ in range(warmup):
        call()
    latencies = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - start)
    total = max(concurrency * 4, calls // 2)
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda _: call(), range(total)))
    return latencies, total / (time.perf_counter() - start)


# --------------------------------------------------------------------------- python
PROGRAM = "import math\nprint(sum(math.isqrt(i) for i in range(1000)))"
EXPECTED = str(sum(int(i**0.5) for i in range(1000)))


@section("python")
def bench_python(args: argparse.Namespace, report: Report) -> None:
    from gem_tool_python import SandboxPool

    from gem_core.errors import SandboxIsolationWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SandboxIsolationWarning)
        pool = SandboxPool(pool_size=args.concurrency, timeout_s=10.0).start()
    report.notes += [f"gem_core sandbox fallback: {w.message}" for w in caught]
    report.notes.append(f"gem_core sandbox isolation: {pool.isolation} (pool of {args.concurrency} warm workers)")

    def ours() -> None:
        result = pool.run(PROGRAM)
        assert result.ok and result.stdout.strip() == EXPECTED, result

    try:
        lat, tput = latency_and_throughput(ours, args.calls, args.concurrency)
    finally:
        pool.close()
    record(report, "gem_core", lat, tput, args.concurrency)

    try:
        from gem.tools.python_code_tool import PythonCodeTool  # type: ignore[import-not-found]
    except Exception as exc:  # gem-llm missing, or its heavy imports fail
        report.notes.append(f"GEM column skipped: cannot import gem.tools.python_code_tool ({exc!r})")
        return
    tool = PythonCodeTool(timeout=10)
    action = f"<python>{PROGRAM}</python>"
    here = os.getcwd()
    # GEM's run_python makes its temp dirs under the current directory: keep them out of the repo.
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)
        try:

            def gem() -> None:
                _, has_error, observation, _ = tool.execute_action(action)
                assert not has_error and EXPECTED in observation, observation

            lat, tput = latency_and_throughput(gem, max(args.calls // 4, 20), args.concurrency)
        finally:
            os.chdir(here)
    record(report, "gem-llm", lat, tput, args.concurrency)
    report.notes.append("gem-llm PythonCodeTool: sandbox_type='none' (no isolation: a string blocklist only)")


def record(report: Report, impl: str, latencies: list[float], throughput: float, concurrency: int) -> None:
    report.add("python", impl, "p50 latency", statistics.median(latencies) * 1e3, "ms")
    report.add("python", impl, "p99 latency", percentile(latencies, 99) * 1e3, "ms")
    report.add("python", impl, f"throughput ({concurrency} concurrent)", throughput, "calls/s")


def _smaps_kib(pid: int) -> dict[str, int]:
    """``/proc/PID/smaps_rollup`` in KiB (``Rss``, ``Pss``, ``Private_Dirty``...); empty if the process is gone."""
    fields = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if rest.strip().endswith("kB"):
                    fields[key] = int(rest.split()[0])
    except OSError:
        pass
    return fields


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(child) for child in fh.read().split()]
    except OSError:
        return []


def _tree(pid: int) -> list[int]:
    return [pid, *(process for child in _children(pid) for process in _tree(child))]


def ready_worker_memory(pool: Any) -> dict[str, float]:
    """What the pool's idle workers cost, in MiB: per ready worker (all its processes) and the fork server.

    ``pss``: proportional set size (pages shared with the fork server and the other workers
    counted in part); ``private``: pages only that worker has (freed when it goes).
    """
    assert pool._zygote is not None
    zygote = pool._zygote.popen.pid
    workers = []
    for worker in _children(zygote):
        rollups = [_smaps_kib(pid) for pid in _tree(worker)]
        pss = sum(r.get("Pss", 0) for r in rollups)
        private = sum(r.get("Private_Clean", 0) + r.get("Private_Dirty", 0) for r in rollups)
        workers.append((pss, private))
    server = _smaps_kib(zygote)
    return {
        "workers": len(workers),
        "pss": statistics.median(w[0] for w in workers) / 1024 if workers else 0.0,
        "private": statistics.median(w[1] for w in workers) / 1024 if workers else 0.0,
        "server_pss": server.get("Pss", 0) / 1024,
    }


@section("sandbox")
def bench_sandbox(args: argparse.Namespace, report: Report) -> None:
    """The issue-16 figures: a trivial call, and ``import numpy`` with numpy pre-imported, full isolation.

    Back-to-back sequential calls drain the warm pool when starting a worker takes longer than a
    call: their p50 is then the rate at which workers start. The "warm worker" figure paces the
    calls (50 ms apart) so each finds a ready worker: the cost of a call itself, full isolation
    included. The memory rows are what each ready worker (``--concurrency`` are kept ready here,
    ``pool_size``; 2 by default) and the fork server cost while idle (issue 29).
    """
    from gem_tool_python import SandboxPool

    cases = {
        "trivial call": ({}, "print(1)", "1"),
        "import numpy (preimport)": ({"preimport": ("numpy",)}, "import numpy; print(numpy.ones(3).sum())", "3.0"),
    }
    for label, (settings, program, expected) in cases.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pool = SandboxPool(pool_size=args.concurrency, timeout_s=10.0, **settings).start()
        report.notes.append(f"sandbox {label}: isolation {pool.isolation}, per-call cgroups: {pool.cgroups}")
        time.sleep(0.5)  # let the pool fill before measuring what its idle workers hold
        memory = ready_worker_memory(pool)
        report.notes.append(f"sandbox {label}: memory measured over {memory['workers']} ready workers")

        def call(pool: SandboxPool = pool, program: str = program, expected: str = expected) -> None:
            result = pool.run(program)
            assert result.ok and result.stdout.strip() == expected, result

        try:
            lat, _ = latency_and_throughput(call, args.calls, args.concurrency)
            # Paced: a pause after each call lets the pool refill, so every call finds a warm worker.
            paced = []
            for _ in range(args.calls):
                time.sleep(0.05)
                start = time.perf_counter()
                call()
                paced.append(time.perf_counter() - start)
        finally:
            pool.close()
        report.add("sandbox", "gem_core", f"{label} p50", statistics.median(lat) * 1e3, "ms")
        report.add("sandbox", "gem_core", f"{label} p99", percentile(lat, 99) * 1e3, "ms")
        report.add("sandbox", "gem_core", f"{label} p50, warm worker", statistics.median(paced) * 1e3, "ms")
        report.add("sandbox", "gem_core", f"{label} PSS per ready worker", memory["pss"], "MiB")
        report.add("sandbox", "gem_core", f"{label} private per ready worker", memory["private"], "MiB")
        report.add("sandbox", "gem_core", f"{label} PSS of fork server", memory["server_pss"], "MiB")


# --------------------------------------------------------------------------- search
@section("search")
def bench_search(args: argparse.Namespace, report: Report) -> None:
    """Queries per second of the search tool: BM25 over the demo corpus, and the HTTP client.

    GEM's search tool needs a dense-retrieval or SerpAPI server (msgpack over mosec), so it has
    no column here; ``bench/search.py`` has the BM25 comparison with ``rank_bm25`` and batching.
    """
    from gem_tool_search import BM25Index, SearchTool, demo_corpus_path
    from gem_tool_search.server import RetrievalServer

    queries = [json.loads(line)["title"] for line in demo_corpus_path().read_text().splitlines()]
    server = RetrievalServer(BM25Index.load_or_build(demo_corpus_path())).start()
    tools = {"BM25": SearchTool(top_k=3), "HTTP": SearchTool(backend="http", url=server.url, top_k=3)}
    try:
        for backend, tool in tools.items():
            lat, tput = latency_and_throughput(query_caller(tool, queries), args.calls, args.concurrency)
            report.add("search", "gem_core", f"{backend} p50 latency", statistics.median(lat) * 1e3, "ms")
            report.add("search", "gem_core", f"{backend} p99 latency", percentile(lat, 99) * 1e3, "ms")
            report.add("search", "gem_core", f"{backend} queries ({args.concurrency} thr)", tput, "q/s")
            report.notes.append(f"search {backend}: {tool.batches_sent} backend calls for all queries (batching)")
    finally:
        for tool in tools.values():
            tool.close()
        server.close()
    report.notes.append("gem-llm search column skipped: its SearchTool needs a retrieval server (see bench/search.py)")


def query_caller(tool: Any, queries: list[str]) -> Callable[[], None]:
    """A call that runs the next query (cycling) through ``tool`` on a fresh event loop, as a sync env would."""
    import asyncio
    import itertools

    cycle = itertools.cycle(queries)

    def one_query() -> None:
        result = asyncio.run(tool.execute({"query": next(cycle)}))
        assert result.ok and result.metadata["doc_ids"], result

    return one_query


# --------------------------------------------------------------------------- output
def print_report(report: Report) -> None:
    by_key: dict[tuple[str, str], dict[str, Row]] = {}
    for row in report.rows:
        by_key.setdefault((row["section"], row["metric"]), {})[row["impl"]] = row
    width = max([28] + [len(f"{row['metric']} ({row['unit']})") for row in report.rows])
    print(f"{'section':<8} {'metric':<{width}} {'gem_core':>12} {'gem-llm':>12} {'ratio':>8}")
    for (sec, metric), impls in by_key.items():
        ours, theirs = impls.get("gem_core"), impls.get("gem-llm")
        unit = (ours or theirs or {}).get("unit", "")
        cell = lambda r: f"{r['value']:.2f}" if r else "-"  # noqa: E731
        ratio = "-"
        if ours and theirs and ours["value"] and theirs["value"]:
            # ratio > 1 means gem_core is better (lower latency, higher throughput)
            better = theirs["value"] / ours["value"] if unit == "ms" else ours["value"] / theirs["value"]
            ratio = f"{better:.1f}x"
        print(f"{sec:<8} {metric + ' (' + unit + ')':<{width}} {cell(ours):>12} {cell(theirs):>12} {ratio:>8}")
    for note in report.notes:
        print(f"note: {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, from {sorted(SECTIONS)}")
    parser.add_argument("--calls", type=int, default=200, help="sequential calls for the latency percentiles")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--json", help="also write the rows and notes to this file")
    args = parser.parse_args(argv)
    report = Report()
    for name in args.sections.split(","):
        if name not in SECTIONS:
            parser.error(f"unknown section {name!r}; known: {sorted(SECTIONS)}")
        SECTIONS[name](args, report)
    print_report(report)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": report.rows, "notes": report.notes, "python": sys.version}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
