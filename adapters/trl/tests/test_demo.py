"""The README's demo (``python -m gem_trl.demo``): a few steps run and write their metrics and plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gem_trl.demo import (
    DEFAULT_ENV,
    DEFAULT_ENV_KWARGS,
    ESTIMATORS,
    fifths,
    main,
    parse_args,
    plot_metrics,
    read_metrics,
    resolve_env,
)
from gem_trl.trainer import ADVANTAGE_ESTIMATORS

from gem_core.errors import ConfigError


@pytest.mark.slow
def test_a_few_demo_steps_write_metrics_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--seed", "3", "--steps", "2", "--batch", "4", "--generations", "2", "--warmup-steps", "2"]
    records = main([*argv, "--output-dir", str(tmp_path)])
    written = read_metrics(tmp_path / "metrics.jsonl")
    assert written == records
    assert [r["step"] for r in written] == [1, 2]
    assert all({"step", "reward", "success", "turns", "loss"} <= r.keys() for r in written)
    assert (tmp_path / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "seed 3;" in out
    assert "first fifth" in out and "last  fifth" in out


@pytest.mark.parametrize(
    ("successes", "expected"),
    [([0.0, 1.0], (0.0, 1.0)), ([0.0] * 5 + [1.0] * 5, (0.0, 1.0)), ([0.5], (0.5, 0.5))],
    ids=["two-steps", "ten-steps", "one-step"],
)
def test_fifths_compares_first_and_last_fifth(successes: list[float], expected: tuple[float, float]) -> None:
    records = [{"step": i + 1, "success": s} for i, s in enumerate(successes)]
    assert fifths(records, "success") == expected


def test_fifths_refuses_an_empty_run() -> None:
    with pytest.raises(ValueError, match="no records"):
        fifths([], "success")


def test_plot_reads_a_metrics_file(tmp_path: Path) -> None:
    lines = [json.dumps({"step": s, "reward": 0.1 * s, "success": 0.1 * s, "turns": 4 - 0.2 * s}) for s in range(1, 8)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    path = plot_metrics(read_metrics(tmp_path / "metrics.jsonl"), tmp_path / "plot.png", title="t")
    assert path.stat().st_size > 1000


@pytest.mark.parametrize(
    ("env_id", "given", "expected"),
    [
        (DEFAULT_ENV, None, DEFAULT_ENV_KWARGS),
        (DEFAULT_ENV, '{"num_disks": 3}', {"num_disks": 3}),
        (DEFAULT_ENV, "{}", {}),
        ("game:GuessTheNumber-v0-easy", None, {}),
        ("game:GuessTheNumber-v0-easy", '{"high": 7}', {"high": 7}),
    ],
    ids=["default-game", "default-game-overridden", "default-game-emptied", "other-game", "other-game-given"],
)
def test_env_kwargs_default_only_for_the_default_game(
    env_id: str, given: str | None, expected: dict[str, object]
) -> None:
    assert resolve_env(env_id, given) == expected


@pytest.mark.parametrize("given", ["[1, 2]", "num_disks=3", '"text"'], ids=["list", "not-json", "string"])
def test_env_kwargs_must_be_a_json_object(given: str) -> None:
    with pytest.raises(ConfigError, match="--env-kwargs"):
        resolve_env(DEFAULT_ENV, given)


def test_estimator_choices_are_the_trainers() -> None:
    assert ESTIMATORS == ADVANTAGE_ESTIMATORS
    assert parse_args([]).estimator == "rebn"
    assert parse_args(["--estimator", "grpo"]).estimator == "grpo"


def test_unknown_estimator_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--estimator", "ppo"])
    assert "invalid choice: 'ppo'" in capsys.readouterr().err
