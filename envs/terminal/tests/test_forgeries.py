"""The forging sweep (``python -m gem_terminal.forgeries``): verdicts, its JSON lines, resuming, any task folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gem_core.errors import ConfigError
from gem_terminal.forgeries import FORGERIES, REFERENCE, Forgery, Play, main, summarize, sweep
from gem_tool_python.episode import episodes_available

USABLE, WHY = episodes_available()
needs_sandbox = pytest.mark.skipif(not USABLE, reason=f"episode sandbox unavailable here: {WHY}")
HARBOR_FOLDER = Path(__file__).parent / "fixtures" / "harbor-reward-txt"


def _play(move: str, reward: float, error: str | None = None, task: str = "t") -> Play:
    return Play(task, move, "sandbox", reward, "done", 0.5, error, "")


@pytest.mark.parametrize(
    ("play", "verdict"),
    [
        (_play(REFERENCE, 1.0), "ok"),
        (_play(REFERENCE, 0.0), "reference-failed"),
        (_play(REFERENCE, 0.5), "reference-failed"),
        (_play("no-op", 0.0), "ok"),
        (_play("no-op", 0.5), "FORGED"),
        (_play("exit-0-on-import", 1.0), "FORGED"),
        (_play("exit-0-on-import", 0.0, error="ToolError: build failed"), "error"),
        (_play(REFERENCE, 1.0, error="ToolError: set-up failed"), "error"),
    ],
    ids=["reference-1", "reference-0", "reference-partial", "move-0", "move-partial", "move-1", "error", "ref-error"],
)
def test_each_play_gets_its_verdict_and_only_all_ok_is_well(play: Play, verdict: str) -> None:
    assert play.verdict == verdict
    table, well = summarize([_play(REFERENCE, 1.0, task="other"), play])
    assert well is (verdict == "ok")
    if verdict != "ok":  # the table names the task on the move's line, in the verdict's column
        line = next(row for row in table.splitlines() if row.startswith(f"| {play.move} |"))
        column = {"FORGED": 3, "reference-failed": 4, "error": 5}[verdict]
        assert line.split("|")[column + 1].strip() == "t", table


def test_the_table_lists_the_reference_first_then_the_classes_in_order() -> None:
    plays = [_play(move, 0.0) for move in reversed(FORGERIES)] + [_play(REFERENCE, 1.0)]
    table, well = summarize(plays)
    moves = [row.split("|")[1].strip() for row in table.splitlines()[2:]]
    assert moves == [REFERENCE, *FORGERIES] and well


@needs_sandbox
def test_the_cli_writes_a_line_per_episode_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plays.jsonl"
    argv = ["--tasks", "text-sort-uniq", "--moves", REFERENCE, "no-op", "--jsonl", str(out), "--jobs", "2"]
    assert main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["move"], r["reward"], r["verdict"], r["backend"]) for r in rows) == [
        ("no-op", 0.0, "ok", "sandbox"),
        (REFERENCE, 1.0, "ok", "sandbox"),
    ]
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 0  # both pairs are in the file: nothing is played again
    assert len(out.read_text().splitlines()) == 2
    assert "2 episodes (0 this run" in capsys.readouterr().out


@needs_sandbox
def test_a_move_that_scores_is_reported_forged(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A "forgery" that simply does the work: the sweep must flag it (and exit 1), or it could flag nothing.
    monkeypatch.setitem(FORGERIES, "does-the-work", Forgery("does-the-work", "the work", lambda task: [task.solution]))
    assert main(["--tasks", "text-sort-uniq", "--moves", "does-the-work"]) == 1
    out = capsys.readouterr().out
    assert "| does-the-work | 1 | 0 | text-sort-uniq | 0 | 0 |" in out, out


@needs_sandbox
def test_a_harbor_task_folder_is_swept() -> None:
    moves = [REFERENCE, "daemon-does-the-work-at-check-time", "program-prints-expected-output"]
    plays = list(sweep({"tasks_dir": str(HARBOR_FOLDER), "backend": "sandbox"}, moves=moves, jobs=2))
    assert sorted((p.move, p.verdict) for p in plays) == sorted((m, "ok") for m in moves), plays
    assert {p.task for p in plays} == {"harbor-reward-txt"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"moves": ["no-such-move"]}, r"unknown move.*no-such-move.*choose from"),
        ({"tasks": ["no-such-task"]}, r"not loaded: no-such-task: not in the folder"),
        ({"jobs": 0}, r"jobs=0; give 1 or more"),
    ],
    ids=["move", "task", "jobs"],
)
def test_bad_sweep_arguments_are_config_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        next(sweep({"backend": "sandbox"}, **kwargs))  # type: ignore[arg-type]


def test_the_cli_says_what_was_wrong(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--moves", "no-such-move"]) == 2
    assert "error: forging sweep: unknown move(s) ['no-such-move']" in capsys.readouterr().err
