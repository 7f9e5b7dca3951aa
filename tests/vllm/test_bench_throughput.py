"""bench/throughput.py's vllm engine: lockstep, continuous and partial rollouts on the real ``AsyncLLMEngine``.

The rows' shape and accounting only (no timings): every counted episode ends by its env
(none failed by a request that vLLM rejected or that ignored the weight update's abort),
each turn's tokens are the count the bench asked vLLM for, and modes that are not run on
vLLM say so.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

MODES = ["lockstep", "continuous", "partial"]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "bench" / "throughput.py"
    spec = importlib.util.spec_from_file_location("bench_throughput", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_vllm_engine_plays_every_mode_to_the_end(bench: ModuleType, async_engine: Any) -> None:
    engine, runner = async_engine
    tokenizer = engine.get_tokenizer()
    run = bench.run_vllm(engine, tokenizer, [4], 1, 2, [*MODES, "gem-vec"], repeats=1, divisor=32)
    rows, step_s = runner.run(run)
    assert step_s > 0
    by_mode = {row.mode: row for row in rows}
    assert sorted(by_mode) == sorted([*MODES, "gem-vec"])
    assert by_mode["gem-vec"].result is None and by_mode["gem-vec"].skipped
    for mode in MODES:
        result = by_mode[mode].result
        assert result is not None, mode
        assert result.episodes == 4 and result.turns >= 4, mode
        assert "not ended by the env" not in result.note, (mode, result.note)
        assert result.tokens > 0 and result.wall_s > 0 and result.busy_s > 0, mode


@pytest.mark.parametrize(
    ("seed", "turn"), [(0, 0), (3, 2), (17, 5)], ids=["seed0-turn0", "seed3-turn2", "seed17-turn5"]
)
def test_vllm_server_samples_the_asked_count_and_calls_it_a_stop(
    bench: ModuleType, async_engine: Any, seed: int, turn: int
) -> None:
    from gem_core.episode import TurnRequest

    engine, runner = async_engine
    server = bench.VllmServer(engine, bench.Clock(0.01), concurrency=1, divisor=32)
    request = TurnRequest(episode_index=0, turn=turn, prompt_ids=[1, 67, 201], messages=[], max_tokens=64, seed=seed)
    generation = runner.run(server.generate(request))
    assert len(generation.token_ids or []) == server.target(seed, turn)
    assert generation.finish_reason == "stop"
