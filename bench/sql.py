"""gem-sql benchmark: episode set-up, query round trip, and episodes per second at 1, 8 and 32 concurrent episodes.

Run: ``python bench/sql.py [--queries 300] [--episodes 320] [--json out.json]`` (with gem-sql installed).

* set-up: opening the read-only connection (``Database``), ``reset`` of a fresh env (first episode:
  connection and schema), ``reset`` of a used env that moves to another database, and ``reset``
  on the same database (the connection is kept);
* query round trip: ``Database.run`` alone, and a ``<sql>`` tool call through ``env.step`` (the
  tool wrapper's parsing, its event loop, a worker thread, formatting);
* episodes/s: N threads, each with its own env, play whole episodes on the bundled databases
  (reset, two exploration queries, the gold answer, scored), all on the same database files.

Medians and percentiles of one run on this machine; compare figures from the same machine only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from gem_sql.data import bundled_database
from gem_sql.database import Database

import gem_core


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def timed(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def ms(values: list[float]) -> dict[str, float]:
    return {"p50_ms": 1000 * statistics.median(values), "p95_ms": 1000 * percentile(values, 95)}


def setup_times(n: int) -> dict[str, dict[str, float]]:
    shop = bundled_database("shop")
    opened: list[Database] = []
    connection = timed(lambda: opened.append(Database(shop)), n)
    for db in opened:
        db.close()

    def fresh_env() -> None:
        env = gem_core.make("sql:Bundled-v0")
        env.reset(options={"index": 0})
        env.close()

    fresh = timed(fresh_env, max(5, n // 10))
    env = gem_core.make("sql:Bundled-v0")
    flip = iter(range(10**9))
    other_db = timed(lambda: env.reset(options={"index": 0 if next(flip) % 2 else 12}), n)  # shop <-> school
    same_db = timed(lambda: env.reset(options={"index": next(flip) % 12}), n)  # all on shop
    env.close()
    return {
        "open_connection": ms(connection),
        "make_and_first_reset": ms(fresh),
        "reset_other_database": ms(other_db),
        "reset_same_database": ms(same_db),
    }


QUERY = "SELECT c.city, count(*) FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.city"


def round_trips(n: int) -> dict[str, dict[str, float]]:
    with Database(bundled_database("shop")) as db:
        raw = timed(lambda: db.run(QUERY), n)
    env = gem_core.make("sql:Shop-v0", tool_wrapper={"max_tool_calls": 10**6})
    env.reset(options={"index": 0})
    tool = timed(lambda: env.step(f"<sql>{QUERY}</sql>"), n)
    env.close()
    return {"database_run": ms(raw), "tool_call_through_step": ms(tool)}


def episodes_per_second(concurrency: int, total: int) -> dict[str, float]:
    per_thread = max(1, total // concurrency)
    envs = [gem_core.make("sql:Bundled-v0") for _ in range(concurrency)]
    golds = [q.query for q in envs[0].unwrapped.questions]
    rewards: list[float] = []
    lock = threading.Lock()

    def play(i: int) -> None:
        env = envs[i]
        for k in range(per_thread):
            index = (i * 7 + k) % len(golds)
            env.reset(options={"index": index})
            env.step("<sql>SELECT name FROM sqlite_master WHERE type = 'table'</sql>")
            env.step(f"<sql>{golds[index]}</sql>")
            reward = env.step(f"<answer>{golds[index]}</answer>")[1]
            with lock:
                rewards.append(reward)

    threads = [threading.Thread(target=play, args=(i,)) for i in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    for env in envs:
        env.close()
    assert rewards == [1.0] * len(rewards), "a gold answer did not score 1"
    return {"episodes": len(rewards), "seconds": elapsed, "episodes_per_s": len(rewards) / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=300, help="calls per latency figure")
    parser.add_argument("--episodes", type=int, default=320, help="episodes per concurrency level")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        os.environ.setdefault("GEM_SQL_CACHE", cache)
        start = time.perf_counter()
        bundled_database("shop")
        build_ms = 1000 * (time.perf_counter() - start)
        result: dict[str, Any] = {
            "machine": f"{platform.machine()} {os.cpu_count()} cpus, python {platform.python_version()}",
            "build_shop_sqlite_ms": build_ms,
            "setup": setup_times(args.queries),
            "round_trip": round_trips(args.queries),
            "throughput": {str(c): episodes_per_second(c, max(args.episodes, c)) for c in (1, 8, 32)},
        }
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
