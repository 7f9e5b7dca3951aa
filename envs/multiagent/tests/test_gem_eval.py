"""``gem eval`` of a model against the scripted opponents: win/draw/loss per seat in the summary.

The model is a loopback OpenAI-compatible endpoint that plays the lowest free cell (a weak, legal player).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gem_core.cli import main
from gem_core.testing_servers import scripted_chat_server


def _lowest_free_cell(body: dict[str, Any]) -> str:
    last = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
    board = last.strip().splitlines()[-4:-1] if last.strip().endswith("?") else []
    free = [int(d) for row in board for d in re.findall(r"\b([1-9])\b", row)]
    return f"I take {min(free) if free else 5}"


@pytest.fixture
def server() -> Iterator[str]:
    with scripted_chat_server(_lowest_free_cell) as chat:
        yield chat.url


def test_gem_eval_against_the_scripted_opponent_reports_each_seat(server: str, tmp_path: Path) -> None:
    pytest.importorskip("httpx", reason="gem eval needs gem-core[eval]")
    trace = tmp_path / "trace.jsonl"
    out = io.StringIO()
    argv = ["eval", "lowest", "multiagent:TicTacToe-v0-vs-scripted", "--base-url", server, "-n", "12"]
    code = main([*argv, "--max-turns", "6", "--trace", str(trace), "--no-progress", "--json"], stdout=out)
    assert code == 0, out.getvalue()
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(records) == 12 and all(r["error"] is None for r in records)
    assert {r["seat"] for r in records} == {"x", "o"}  # the seat is drawn per episode
    summary = json.loads(out.getvalue())["envs"][0]["outcomes_per_seat"]
    assert sum(sum(c.values()) for c in summary.values()) == 12
    assert all(c["win"] == 0 for c in summary.values())  # the minimax opponent never loses
    assert all(r["outcome"] in ("draw", "loss") and r["episode_return"] in (0.0, -1.0) for r in records)
