"""Math grading throughput: gem-math's shared grading pool vs GEM's grader, side by side.

Grades one seeded corpus of (response, reference) pairs (equivalent LaTeX forms, wrong answers,
identical strings) and reports graded answers per second, median latency and, when GEM is
available, how often the two graders agree.

gem-math is measured three ways: one caller, several threads sharing the process-wide pool, and
asyncio (``agrade``). GEM (``gem-llm``) is measured the way its ``MathEnv`` grades by default: a
``multiprocessing.Pool(1)`` per env and ``apply_async(...).get(timeout=1)`` per answer. GEM pins
other versions of our dependencies (reasoning-gym 0.1.23), so it usually lives in its own venv:
pass ``--gem-python path/to/venv/bin/python`` and that interpreter grades the same corpus.

Usage::

    python bench/grading.py                      # gem-math only
    python bench/grading.py --gem-python .venv-gem/bin/python
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import threading
import time
from fractions import Fraction
from typing import Any

Pair = tuple[str, str]


def make_corpus(n: int, seed: int = 0) -> list[Pair]:
    """``n`` (response, reference) pairs: a quarter identical, a quarter equivalent, half other."""
    rng = random.Random(seed)
    pairs: list[Pair] = []
    while len(pairs) < n:
        a, b = rng.randint(1, 40), rng.randint(2, 40)
        frac = Fraction(a, b)
        kind = rng.randrange(8)
        if kind == 0:  # identical strings
            pairs.append((f"so \\boxed{{{a * b}}}", str(a * b)))
        elif kind == 1:  # fraction written another way
            pairs.append(
                (f"\\boxed{{\\dfrac{{{2 * a}}}{{{2 * b}}}}}", f"\\frac{{{frac.numerator}}}{{{frac.denominator}}}")
            )
        elif kind == 2:  # decimal vs fraction
            pairs.append((f"\\boxed{{{float(Fraction(a, 4)):g}}}", f"\\frac{{{a}}}{{4}}"))
        elif kind == 3:  # wrong number
            pairs.append((f"The answer is \\boxed{{{a + b}}}.", str(a * b + 1)))
        elif kind == 4:  # thousands separator
            value = rng.randint(1000, 999_999)
            pairs.append((f"\\boxed{{{value:,}}}", str(value)))
        elif kind == 5:  # interval, sometimes with the wrong bracket
            close = "]" if rng.random() < 0.5 else ")"
            pairs.append((f"\\boxed{{({a}, {a + b}{close}}}", f"({a},{a + b}]"))
        elif kind == 6:  # surd forms
            pairs.append((f"\\boxed{{{a}\\sqrt{{2}}}}", f"\\sqrt{{{2 * a * a}}}"))
        else:  # expression with terms reordered
            pairs.append((f"\\boxed{{{a}x + {b}}}", f"{b} + {a}x"))
    return pairs


def _summary(name: str, latencies: list[float], wall: float, verdicts: list[bool]) -> dict[str, Any]:
    return {
        "grader": name,
        "answers": len(verdicts),
        "answers_per_s": len(verdicts) / wall,
        "median_ms": statistics.median(latencies) * 1e3,
        "p95_ms": sorted(latencies)[int(0.95 * (len(latencies) - 1))] * 1e3,
        "correct": sum(verdicts),
        "verdicts": verdicts,
    }


def bench_ours_sequential(corpus: list[Pair], pool: Any, label: str = "1 caller") -> dict[str, Any]:
    latencies, verdicts = [], []
    start = time.perf_counter()
    for response, gold in corpus:
        t0 = time.perf_counter()
        verdicts.append(pool.grade(response, gold).correct)
        latencies.append(time.perf_counter() - t0)
    return _summary(
        f"gem-math pool, {label} ({pool.workers} workers)", latencies, time.perf_counter() - start, verdicts
    )


def bench_ours_threads(corpus: list[Pair], pool: Any, threads: int) -> dict[str, Any]:
    latencies: list[float] = [0.0] * len(corpus)
    verdicts: list[bool] = [False] * len(corpus)

    def work(offset: int) -> None:
        for i in range(offset, len(corpus), threads):
            t0 = time.perf_counter()
            verdicts[i] = pool.grade(*corpus[i]).correct
            latencies[i] = time.perf_counter() - t0

    start = time.perf_counter()
    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    name = f"gem-math pool, {threads} threads ({pool.workers} workers)"
    return _summary(name, latencies, time.perf_counter() - start, verdicts)


def bench_ours_async(corpus: list[Pair], pool: Any) -> dict[str, Any]:
    async def one(pair: Pair) -> tuple[bool, float]:
        t0 = time.perf_counter()
        result = await pool.agrade(*pair)
        return result.correct, time.perf_counter() - t0

    async def main() -> list[tuple[bool, float]]:
        return await asyncio.gather(*(one(p) for p in corpus))

    start = time.perf_counter()
    results = asyncio.run(main())
    wall = time.perf_counter() - start
    return _summary(
        f"gem-math pool, asyncio ({pool.workers} workers)", [r[1] for r in results], wall, [r[0] for r in results]
    )


# Runs under GEM's interpreter: grades the corpus as GEM's MathEnv does by default and prints JSON.
_GEM_SCRIPT = r"""
import json, multiprocessing, sys, time
from gem.envs.math_env import MathEnv
corpus = json.load(sys.stdin)
out = {}
pool = multiprocessing.Pool(1)  # what each GEM MathEnv starts (use_mp=True)
pool.apply_async(MathEnv.check_correct, ("\\boxed{1}", "1")).get(timeout=60)  # warm-up, as for ours
lat, verdicts = [], []
start = time.perf_counter()
for response, gold in corpus:
    t0 = time.perf_counter()
    try:
        ok = pool.apply_async(MathEnv.check_correct, (response, gold)).get(timeout=1)
    except multiprocessing.TimeoutError:
        ok = False
    verdicts.append(bool(ok)); lat.append(time.perf_counter() - t0)
out["pool"] = [lat, time.perf_counter() - start, verdicts]
pool.terminate()
print(json.dumps(out))
"""


def bench_gem(corpus: list[Pair], python: str, label: str = "") -> list[dict[str, Any]]:
    proc = subprocess.run(
        [python, "-c", _GEM_SCRIPT], input=json.dumps(corpus), capture_output=True, text=True, timeout=3600
    )
    if proc.returncode != 0:
        raise SystemExit(f"GEM's grader failed under {python}:\n{proc.stderr[-3000:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    lat, wall, verdicts = data["pool"]
    return [_summary(f"GEM MathEnv grader (Pool(1) per env, apply_async){label}", lat, wall, verdicts)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=400, help="answers to grade")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gem-python", help="interpreter with gem-llm installed (default: this one, if it has gem)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    corpus = make_corpus(args.n, args.seed)
    from gem_math.grading import GradingPool, _default_workers

    # Verdict caching off: every answer is really graded, as in GEM.
    pool = GradingPool(workers=_default_workers(), cache_size=0)
    t0 = time.perf_counter()
    pool.start()  # startup is reported separately, not mixed into throughput
    startup_s = time.perf_counter() - t0
    results = [
        bench_ours_sequential(corpus, pool),
        bench_ours_threads(corpus, pool, args.threads),
        bench_ours_async(corpus, pool),
    ]
    timeouts = pool.timeouts
    pool.close()
    # A sampled group (GRPO: 8 responses per prompt, most with the same final answer) with the verdict cache on.
    group_corpus = [pair for pair in corpus[: max(1, args.n // 8)] for _ in range(8)]
    cached = GradingPool(workers=_default_workers())
    cached.start()
    results.append(bench_ours_sequential(group_corpus, cached, "1 caller, 8 samples/prompt, verdict cache"))
    cached.close()

    from gem_math.grading import _answer_of, _quick_verdict, extract_boxed

    # The answers that need math-verify (no plain-number shortcut): the like-for-like comparison.
    hard = [(r, g) for r, g in corpus if _quick_verdict(_answer_of(extract_boxed(r)) or "", g) is None]
    slow_pool = GradingPool(workers=_default_workers(), cache_size=0)
    slow_pool.start()
    results.append(bench_ours_sequential(hard, slow_pool, "1 caller, math-verify answers only"))
    slow_pool.close()

    gem_python = args.gem_python
    if gem_python is None:
        try:
            import gem  # noqa: F401

            gem_python = sys.executable
        except ImportError:
            print("gem-llm not installed here and no --gem-python given: GEM's grader not measured", file=sys.stderr)
    if gem_python:
        results += bench_gem(corpus, gem_python)
        results += bench_gem(hard, gem_python, ", math-verify answers only")

    base = results[0]["answers_per_s"]
    in_parent = len(corpus) - len(hard)
    print(
        f"corpus: {len(corpus)} answers (seed {args.seed}); gem-math pool startup {startup_s:.2f}s; "
        f"gem-math timeouts (1 s CPU limit, counted wrong): {timeouts}; "
        f"decided in the parent without math-verify (plain numbers): {in_parent}"
    )
    print(f"{'grader':72} {'answers/s':>10} {'median ms':>10} {'p95 ms':>8} {'correct':>8} {'vs 1 caller':>11}")
    for r in results:
        print(
            f"{r['grader']:72} {r['answers_per_s']:10.1f} {r['median_ms']:10.2f} {r['p95_ms']:8.2f} "
            f"{r['correct']:8d} {r['answers_per_s'] / base:10.2f}x"
        )
    gem_results = [r for r in results if r["grader"].startswith("GEM")]
    if gem_results:
        ours, theirs = results[0]["verdicts"], gem_results[0]["verdicts"]
        agree = sum(a == b for a, b in zip(ours, theirs, strict=True))
        print(f"verdict agreement with GEM: {agree}/{len(ours)}")
        for (response, gold), a, b in list(zip(corpus, ours, theirs, strict=True)):
            if a != b:
                print(f"  differs: {response!r} vs {gold!r}: gem-math {a}, GEM {b}")
                break
        ratio = results[0]["answers_per_s"] / gem_results[0]["answers_per_s"]
        print(f"gem-math (1 caller) / GEM: {ratio:.2f}x answers per second")
        hard_ours = next(r for r in results if "only" in r["grader"] and r["grader"].startswith("gem-math"))
        hard_gem = next(r for r in gem_results if "only" in r["grader"])
        ratio = hard_ours["answers_per_s"] / hard_gem["answers_per_s"]
        print(f"on the math-verify answers only: gem-math / GEM {ratio:.2f}x answers per second")
    if args.json:
        print(json.dumps([{k: v for k, v in r.items() if k != "verdicts"} for r in results], indent=2))


if __name__ == "__main__":
    main()
