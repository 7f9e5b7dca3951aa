"""Traces (streamed, repaired after a kill, read back), the summary statistics, gem view."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

pytest.importorskip("rich", reason="the eval extra installs rich")

from gem_core.errors import TrajectoryError
from gem_core.eval.report import print_episode, print_summary
from gem_core.eval.run import _wilson, summarize
from gem_core.eval.traces import TRACE_SCHEMA, TraceWriter, finished_keys, read_trace


def record(env_id: str, seed: int, success: bool, ret: float, error: str | None = None) -> dict[str, object]:
    return {
        "env_id": env_id,
        "seed": seed,
        "model": "m",
        "error": error,
        "episode_return": ret,
        "success": success,
        "num_turns": 2,
        "completion_tokens": 10,
        "messages": [
            {"role": "user", "content": "Guess."},
            {"role": "assistant", "content": "My guess is 8"},
            {"role": "user", "content": "Lower."},
            {"role": "assistant", "content": "My guess is 4"},
        ],
        "turns": [
            {"action": "My guess is 8", "reward": 0.0, "stop_reason": "stop"},
            {"action": "<cut>", "reward": -0.1, "stop_reason": "length"},
        ],
        "end_reason": "env",
        "wall_s": 0.5,
    }


def test_round_trip_and_keys(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rows = [record("a:X-v0", 0, True, 1.0), record("a:X-v0", 1, False, 0.0, error="ValueError: x")]
    with TraceWriter(str(path)) as writer:
        for row in rows:
            writer.write(row)
    back = read_trace(path)
    assert [{k: v for k, v in r.items() if k != "schema"} for r in back] == rows
    assert all(r["schema"] == TRACE_SCHEMA for r in back)
    assert finished_keys(back) == {("a:X-v0", 0), ("a:X-v0", 1)}


def test_a_partial_last_line_is_dropped_and_repaired(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TraceWriter(str(path)) as writer:
        writer.write(record("a:X-v0", 0, True, 1.0))
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"schema": "gem.eval/1", "env_id": "a:X-v0", "se')  # killed mid-write
    assert len(read_trace(path)) == 1
    read_trace(path, repair=True)
    assert path.read_text(encoding="utf-8").endswith("}\n")
    with TraceWriter(str(path)) as writer:
        writer.write(record("a:X-v0", 1, True, 1.0))
    assert [r["seed"] for r in read_trace(path)] == [0, 1]


def test_a_corrupt_line_in_the_middle_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('not json\n{"schema": "gem.eval/1", "env_id": "a", "seed": 0}\n', encoding="utf-8")
    with pytest.raises(TrajectoryError, match="t.jsonl:1"):
        read_trace(path)


def test_summary_statistics() -> None:
    rows = [record("a:X-v0", i, i < 3, float(i < 3)) for i in range(4)] + [
        record("b:Y-v0", 0, False, 0.0, error="boom")
    ]
    first, second = summarize(rows)
    assert (first.env_id, first.episodes, first.errors, first.success) == ("a:X-v0", 4, 0, 0.75)
    low, high = first.success_ci
    assert 0.3 < low < 0.75 < high < 1.0
    assert first.reward == 0.75 and first.reward_ci == pytest.approx(1.96 * 0.5 / 2)
    assert second.errors == 1 and second.success == 0.0 and second.reward_ci == 0.0
    assert _wilson(0, 10)[0] == 0.0 and _wilson(10, 10)[1] == 1.0  # no interval past [0, 1]
    out = io.StringIO()
    print_summary([first, second], out)
    assert "a:X-v0" in out.getvalue() and "0.750 [" in out.getvalue()
    json.dumps([s.as_dict() for s in (first, second)])


def test_view_shows_the_conversation_with_rewards() -> None:
    out = io.StringIO()
    print_episode(record("a:X-v0", 3, False, -0.1), out)
    text = out.getvalue()
    assert "a:X-v0 seed=3" in text and "My guess is 4" in text
    assert "reward -0.100 (cut at the token limit)" in text
