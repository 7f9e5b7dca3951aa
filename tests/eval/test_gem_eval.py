"""gem eval end to end against a real OpenAI-compatible server (transformers serve) and the local hf backend."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gem_core.cli import main
from gem_core.eval.traces import read_trace

GAMES = ["core:NumberGuess-v0", "game:GuessTheNumber-v0-easy"]
TOOL_ENV = "core:NumberGuess-v0-echo"

# one transformers serve for the file (a session fixture): under pytest-xdist, on one worker
pytestmark = pytest.mark.xdist_group("eval-openai-server")


def gem(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), stdout=out)
    return code, out.getvalue()


def test_two_games_and_a_tool_env_with_trace_table_json_and_plot(
    openai_server: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    model = str(tiny_model_dir)  # the name the server knows it by
    pytest.importorskip("gem_games", reason="the eval tox env installs gem-games")
    trace, png = tmp_path / "trace.jsonl", tmp_path / "eval.png"
    common = ["--base-url", openai_server, "-n", "3", "--max-turns", "3", "--max-turn-tokens", "12"]
    code, out = gem(
        "eval",
        model,
        *GAMES,
        TOOL_ENV,
        *common,
        "--temperature",
        "1.0",
        "--trace",
        str(trace),
        "--plot",
        str(png),
        "--no-progress",
    )
    assert code == 0, out
    for env_id in (*GAMES, TOOL_ENV):
        assert env_id in out
    assert "success (95% CI)" in out and f"plot: {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    records = read_trace(trace)
    assert sorted((r["env_id"], r["seed"]) for r in records) == sorted(
        (e, s) for e in (*GAMES, TOOL_ENV) for s in range(3)
    )
    for r in records:
        assert r["error"] is None, r["error"]
        assert r["model"] == model and r["backend"] == "openai" and r["sampling"]["temperature"] == 1.0
        assert 1 <= r["num_turns"] <= 3 and r["prompt_tokens"] > 0 and r["completion_tokens"] > 0
        assert r["messages"][0]["role"] == "user" and len(r["turns"]) == r["num_turns"]
    tool_intro = next(r for r in records if r["env_id"] == TOOL_ENV)["messages"][0]["content"]
    assert "echo" in tool_intro  # the tool wrapper's instructions reached the model

    code, out = gem("eval", "--config", str(_config(tmp_path, openai_server, model)), "--json")
    assert code == 0
    summary = json.loads(out)
    assert [e["env_id"] for e in summary["envs"]] == ["core:NumberGuess-v0"]
    assert summary["envs"][0]["episodes"] == 2 and summary["backend"] == "openai"

    code, out = gem("view", str(trace), "--env", TOOL_ENV, "--seed", "1")
    assert code == 0 and f"{TOOL_ENV} seed=1" in out and "assistant" in out


def _config(tmp_path: Path, url: str, model: str) -> Path:
    path = tmp_path / "eval.json"
    path.write_text(
        json.dumps(
            {
                "model": model,
                "env_ids": ["core:NumberGuess-v0"],
                "base_url": url,
                "num_episodes": 2,
                "max_turns": 2,
                "max_turn_tokens": 8,
            }
        ),
        encoding="utf-8",
    )
    return path


def test_killed_run_resumes_without_losing_or_repeating_episodes(
    openai_server: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    argv = [
        sys.executable,
        "-m",
        "gem_core.cli",
        "eval",
        str(tiny_model_dir),
        "core:NumberGuess-v0",
        "--base-url",
        openai_server,
        "-n",
        "12",
        "--max-turns",
        "5",
        "--max-turn-tokens",
        "16",
        "--concurrency",
        "1",
        "--temperature",
        "1.0",
        "--trace",
        str(trace),
        "--no-progress",
    ]
    log = tmp_path / "killed.log"
    with open(log, "wb") as handle:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=handle, start_new_session=True)
    deadline = time.monotonic() + 240
    while (not trace.exists() or len(read_trace(trace)) < 2) and time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    before = read_trace(trace)
    assert 2 <= len(before) < 12
    with open(trace, "a", encoding="utf-8") as handle:  # as if killed in the middle of a line
        handle.write('{"schema": "gem.eval/1", "env_id": "core:Num')
    code, out = gem(*argv[3:], "--resume")
    assert code == 0, out
    after = read_trace(trace)
    assert sorted(r["seed"] for r in after) == list(range(12))  # each seed exactly once
    assert after[: len(before)] == before  # what was finished before the kill is kept as it was


def test_completions_api_with_a_local_tokenizer(openai_server: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    code, out = gem(
        "eval",
        str(tiny_model_dir),
        "core:NumberGuess-v0",
        "--base-url",
        openai_server,
        "--api",
        "completions",
        "--tokenizer",
        str(tiny_model_dir),
        "-n",
        "2",
        "--max-turns",
        "2",
        "--max-turn-tokens",
        "8",
        "--json",
    )
    assert code == 0, out
    assert json.loads(out)["envs"][0]["errors"] == 0


def test_hf_backend_plays_token_in_token_out(tiny_model_dir: Path, tmp_path: Path) -> None:
    trace = tmp_path / "hf.jsonl"
    code, out = gem(
        "eval",
        str(tiny_model_dir),
        "core:NumberGuess-v0",
        "--backend",
        "hf",
        "-n",
        "4",
        "--max-turns",
        "3",
        "--max-turn-tokens",
        "6",
        "--trace",
        str(trace),
        "--json",
    )
    assert code == 0, out
    records = read_trace(trace)
    assert len(records) == 4 and all(r["error"] is None for r in records)
    assert all(t["generated_tokens"] <= 6 for r in records for t in r["turns"])
    assert json.loads(out)["backend"] == "hf"
