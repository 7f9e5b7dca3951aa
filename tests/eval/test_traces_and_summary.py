"""Traces (streamed, repaired after a kill, read back), the summary statistics, gem view."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("rich", reason="the eval extra installs rich")

from gem_core.episode import EpisodeLimits, Generation, TurnRequest
from gem_core.errors import ConfigError, TrajectoryError
from gem_core.eval.backends import Backend, Sampling
from gem_core.eval.report import print_episode, print_summary
from gem_core.eval.run import EvalSettings, _wilson, evaluate, summarize
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


# ----------------------------------------------------------------- faults: cut files, bad records, resume


def test_a_complete_last_record_without_its_newline_is_kept_and_the_next_append_starts_a_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    with TraceWriter(str(path)) as writer:
        writer.write(record("a:X-v0", 0, True, 1.0))
    path.write_bytes(path.read_bytes()[:-1])  # killed between the record and its newline
    assert [r["seed"] for r in read_trace(path)] == [0]
    with TraceWriter(str(path)) as writer:  # opening repairs the end first
        writer.write(record("a:X-v0", 1, True, 1.0))
    assert [r["seed"] for r in read_trace(path)] == [0, 1]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.pop("seed"), r"t.jsonl:2: the record has no 'seed'"),
        (lambda r: r.pop("env_id"), r"t.jsonl:2: the record has no 'env_id'"),
        (lambda r: r.update(seed="3"), r"t.jsonl:2: seed is '3', not int"),
        (lambda r: r.update(seed=True), r"t.jsonl:2: seed is True, not int"),
        (lambda r: r.update(success=None), r"t.jsonl:2: success is None, not bool"),
        (lambda r: r.update(schema="other/1"), r"t.jsonl:2: schema is 'other/1'"),
        (lambda r: r.update(seed=0), r"t.jsonl:2: a:X-v0 seed=0 is already at line 1"),
    ],
    ids=["no-seed", "no-env-id", "seed-str", "seed-bool", "success-null", "other-schema", "duplicate"],
)
def test_every_record_is_checked_with_file_and_line(tmp_path: Path, mutate: Any, message: str) -> None:
    path = tmp_path / "t.jsonl"
    bad = {"schema": TRACE_SCHEMA, **record("a:X-v0", 1, True, 1.0)}
    mutate(bad)
    lines = [json.dumps({"schema": TRACE_SCHEMA, **record("a:X-v0", 0, True, 1.0)}), json.dumps(bad)]
    for ending in ("\n", ""):  # a bad whole record is an error at the end of the file too
        path.write_text("\n".join(lines) + ending, encoding="utf-8")
        with pytest.raises(TrajectoryError, match=message):
            read_trace(path)


class ScriptedBackend(Backend):
    """Message mode, no server: every reply is the same guess."""

    def __init__(self) -> None:
        super().__init__("m", Sampling())

    async def generate(self, request: TurnRequest, key: str) -> Generation:
        return Generation(text="My guess is 8")


ENV = "core:NumberGuess-v0"
SEEDS = 5


def evaluate_into(path: Path, *, resume: bool) -> list[dict[str, Any]]:
    settings = EvalSettings(
        env_ids=[ENV],
        num_episodes=SEEDS,
        limits=EpisodeLimits(max_turns=1),
        trace_path=str(path),
        resume=resume,
        concurrency=2,
    )
    return asyncio.run(evaluate(ScriptedBackend(), settings))


text_values = st.text(st.characters(codec="utf-8"), max_size=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seeds=st.lists(st.integers(0, SEEDS - 1), unique=True, max_size=SEEDS),
    texts=st.lists(text_values, min_size=SEEDS, max_size=SEEDS),
    cut=st.floats(0, 1),
    near_line_end=st.one_of(st.none(), st.tuples(st.integers(0, SEEDS), st.integers(-2, 1))),
)
def test_any_prefix_of_a_trace_plus_resume_gives_each_episode_once(
    tmp_path_factory: pytest.TempPathFactory,
    seeds: list[int],
    texts: list[str],
    cut: float,
    near_line_end: tuple[int, int] | None,
) -> None:
    path = tmp_path_factory.mktemp("cut") / "trace.jsonl"
    rows = [{**record(ENV, seed, False, 0.0), "messages": [{"role": "user", "content": texts[seed]}]} for seed in seeds]
    with TraceWriter(str(path)) as writer:
        for row in rows:
            writer.write(row)
    whole = path.read_bytes()
    ends = [i + 1 for i, byte in enumerate(whole) if byte == ord("\n")]
    if near_line_end is not None and ends:  # the cuts that matter most: around a record's newline
        line, delta = near_line_end
        offset = max(0, min(len(whole), ends[line % len(ends)] + delta))
    else:
        offset = round(cut * len(whole))
    path.write_bytes(whole[:offset])  # killed anywhere, even inside a UTF-8 character
    kept = read_trace(path)
    assert [r["seed"] for r in kept] == seeds[: len(kept)]  # a prefix of what was written, none altered
    evaluate_into(path, resume=True)
    after = read_trace(path)
    assert sorted(r["seed"] for r in after) == list(range(SEEDS))  # each episode exactly once
    assert after[: len(kept)] == kept  # what survived the cut is kept as it was
    assert path.read_bytes().endswith(b"\n")


def test_a_run_into_an_existing_trace_without_resume_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    evaluate_into(path, resume=False)
    with pytest.raises(ConfigError, match="already holds episodes: pass --resume"):
        evaluate_into(path, resume=False)
    assert len(read_trace(path)) == SEEDS


def test_games_played_from_a_seat_report_win_draw_loss_per_seat() -> None:
    rows = [
        {**record("multiagent:TicTacToe-v0-vs-scripted", i, outcome == "win", 1.0), "seat": seat, "outcome": outcome}
        for i, (seat, outcome) in enumerate([("x", "win"), ("x", "draw"), ("o", "loss"), ("o", "loss"), ("x", "draw")])
    ]
    (summary,) = summarize([*rows, record("multiagent:TicTacToe-v0-vs-scripted", 9, False, 0.0, error="boom")])
    assert summary.outcomes == {"o": {"win": 0, "draw": 0, "loss": 2}, "x": {"win": 1, "draw": 2, "loss": 0}}
    out = io.StringIO()
    print_summary([summary], out)
    assert "win/draw/loss per seat" in out.getvalue() and "x 1/2/0" in out.getvalue()
    assert summary.as_dict()["outcomes_per_seat"] == summary.outcomes
    (plain,) = summarize([record("a:X-v0", 0, True, 1.0)])  # other envs: no column
    out = io.StringIO()
    print_summary([plain], out)
    assert plain.outcomes == {} and "per seat" not in out.getvalue()
