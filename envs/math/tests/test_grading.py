import asyncio
import threading
import time

import pytest

from gem_core.errors import ConfigError, GradingError
from gem_math.grading import GradingPool, _quick_verdict, extract_boxed, get_grading_pool, grade

# (response, reference, expected verdict): the grader's contract on forms that trip up string matching.
TRICKY_PAIRS = [
    ("\\boxed{\\frac{1}{2}}", "1/2", True),
    ("\\boxed{0.5}", "\\frac12", True),
    ("\\boxed{\\dfrac{3}{4}}", "\\frac{3}{4}", True),
    ("\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", True),
    ("\\boxed{\\frac{1}{3}}", "0.33", False),
    ("\\boxed{(1, 2]}", "(1,2]", True),
    ("\\boxed{[1, 2)}", "(1,2]", False),
    ("\\boxed{[1, \\infty)}", "[1,\\infty)", True),
    ("\\boxed{(2, 3)}", "(2,3)", True),
    ("\\boxed{10\\text{ cm}}", "10", True),
    ("\\boxed{90^\\circ}", "90", True),
    ("\\boxed{1,000}", "1000", True),
    ("\\boxed{12,600}", "12600", True),
    ("\\boxed{1,000,000}", "1000000", True),
    ("\\boxed{2} and \\boxed{3}", "2, 3", True),
    ("\\boxed{2}, \\boxed{3}", "3", False),  # hedging between two answers earns nothing
    ("first \\boxed{3}, finally \\boxed{3}", "3", True),  # a repeated box counts once
    ("\\boxed{\\{1,2\\}}", "\\{2,1\\}", True),
    ("\\boxed{-3, 3}", "3, -3", True),
    ("\\boxed{x=5}", "5", True),
    ("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt{2}}{2}", True),
    ("\\boxed{5\\sqrt{2}}", "\\sqrt{50}", True),
    ("\\boxed{9\\pi}", "9\\pi", True),
    ("\\boxed{\\pi}", "3.14159", False),
    ("\\boxed{3x+2}", "2+3x", True),
    ("\\boxed{2}", "3", False),
    ("\\boxed{\\text{(A)}}", "A", True),
    ("\\boxed{A}", "B", False),
    ("the answer is 3", "3", False),  # no box: a format error, never correct
    ("\\boxed{}", "0", False),
]


@pytest.mark.parametrize(
    ("response", "gold", "expected"), TRICKY_PAIRS, ids=[f"{r[:28]}~{g}" for r, g, _ in TRICKY_PAIRS]
)
def test_tricky_pairs(response, gold, expected):
    result = grade(response, gold, timeout=60)  # the verdict is under test here, not the speed
    assert result.correct is expected, result
    assert not result.timed_out


@pytest.mark.parametrize(
    ("text", "boxes"),
    [
        ("no box", []),
        ("\\boxed{1} then \\boxed{2}", ["1", "2"]),
        ("\\boxed{\\frac{1}{2}}", ["\\frac{1}{2}"]),
        ("\\boxed{\\boxed{7}}", ["\\boxed{7}"]),
        ("\\boxed{\\{1,2\\}}", ["\\{1,2\\}"]),
        ("\\boxed{unclosed and \\boxed{4}", ["4"]),
        ("\\fbox{5}", ["5"]),
        ("\\boxed {6}", ["6"]),
    ],
    ids=["none", "two", "nested-braces", "nested-box", "escaped-braces", "unbalanced", "fbox", "space"],
)
def test_extract_boxed(text, boxes):
    assert extract_boxed(text) == boxes


def test_extract_boxed_is_linear_on_junk():
    start = time.perf_counter()
    assert extract_boxed("\\boxed{" * 20_000) == []
    assert time.perf_counter() - start < 5  # generous: guards against quadratic rescans, not a benchmark


@pytest.mark.parametrize(
    ("answer", "gold", "verdict"),
    [
        ("25", "26", False),
        ("25", "25.0", True),
        ("12,600", "12600", True),
        ("\\frac{2}{4}", "1/2", True),
        ("-3", "-3", True),
        ("0.33", "\\frac{1}{3}", None),  # tolerance questions go to math-verify
        ("2", "3.5", None),
        ("x+1", "1+x", None),
        ("1,00", "100", None),
    ],
    ids=[
        "ints-differ",
        "int-vs-decimal",
        "separator",
        "fractions",
        "negative",
        "near",
        "int-vs-dec",
        "expr",
        "odd-comma",
    ],
)
def test_quick_verdicts_for_plain_numbers(answer, gold, verdict):
    assert _quick_verdict(answer, gold) is verdict


def test_format_error_is_reported():
    result = grade("I think it is 4", "4")
    assert result.format_error and not result.correct and result.answer is None


def test_identical_answer_skips_the_workers():
    pool = GradingPool(workers=1)
    try:
        assert pool.grade("\\boxed{ 42 }", "42").correct
        assert pool._running == 0  # the fast path started no worker
    finally:
        pool.close()


def test_timeout_kills_and_replaces_a_stuck_worker():
    # Catastrophic regex backtracking stands in for a sympy call that never returns.
    pool = GradingPool(workers=1, timeout=0.5, checker="re:fullmatch")
    try:
        start = time.perf_counter()
        correct, timed_out, error = pool.verify("(a+)+b", "a" * 40)
        assert (correct, timed_out) == (False, True) and "0.5" in error
        assert time.perf_counter() - start < 30
        assert pool.timeouts == 1
        assert pool.verify("a+", "aaa") == (True, False, None)  # a fresh worker took over
        assert pool._running == 1
        assert pool.verify("(a+)+b", "a" * 40)[1]  # a timeout is not remembered as a verdict
        assert pool.timeouts == 2
    finally:
        pool.close()


def test_verdicts_are_cached():
    pool = GradingPool(workers=1, checker="operator:contains")
    try:
        assert pool.verify("abc", "b") == (True, False, None)
        assert pool.verify("abc", "b") == (True, False, None)
        assert (pool.graded, pool.cache_hits) == (1, 1)
    finally:
        pool.close()


def test_checker_exception_is_a_wrong_answer():
    pool = GradingPool(workers=1, checker="operator:truediv")
    try:
        correct, timed_out, error = pool.verify("x", "y")
        assert not correct and not timed_out and "TypeError" in error
        assert pool._running == 1  # the worker survived
    finally:
        pool.close()


def test_bad_checker_fails_loudly():
    pool = GradingPool(workers=1, checker="gem_math.grading:no_such_checker")
    try:
        with pytest.raises(GradingError, match="failed to start"):
            pool.verify("1", "1")
    finally:
        pool.close()


def test_limit_counts_cpu_time_not_waiting():
    # sigtimedwait((), t) waits t seconds using no CPU: only the wall-clock cap (wall_factor x limit) stops it.
    pool = GradingPool(workers=1, timeout=0.2, wall_factor=5, checker="signal:sigtimedwait")
    try:
        pool.start()
        start = time.perf_counter()
        assert pool.verify((), 0.6) == (False, False, None)  # answered, though past the 0.2 s limit
        assert time.perf_counter() - start >= 0.6
        correct, timed_out, _ = pool.verify((), 3.0)  # past the 1 s wall cap
        assert timed_out and not correct
    finally:
        pool.close()


def test_closed_pool_refuses_work():
    pool = GradingPool(workers=1)
    pool.close()
    pool.close()
    with pytest.raises(GradingError, match="closed"):
        pool.verify("1", "2")


@pytest.mark.parametrize(("workers", "timeout"), [(0, 1.0), (1, 0.0)], ids=["no-workers", "zero-timeout"])
def test_pool_rejects_bad_settings(workers, timeout):
    with pytest.raises(ConfigError):
        GradingPool(workers=workers, timeout=timeout)


def test_shared_pool_from_many_threads():
    pool = get_grading_pool()
    assert get_grading_pool() is pool
    results: list[bool] = []

    def work(i: int) -> None:
        results.append(pool.grade(f"\\boxed{{\\frac{{{i}}}{{2}}}}", f"{i / 2}", timeout=60).correct)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 12
    assert pool._running <= pool.workers


def test_async_grading_runs_concurrently_with_the_loop():
    pool = get_grading_pool()

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        tick_task = asyncio.create_task(ticker())
        results = await asyncio.gather(*(pool.agrade(f"\\boxed{{{i}/4}}", f"{i * 0.25}", timeout=60) for i in range(8)))
        tick_task.cancel()
        return results, ticks

    results, ticks = asyncio.run(main())
    assert all(r.correct for r in results)
    assert ticks > 0  # the event loop kept running while answers were graded
