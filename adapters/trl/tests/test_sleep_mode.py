"""Colocated vLLM with ``vllm_enable_sleep_mode``: one wake-up, one weight sync and one sleep per rollout.

Runs TRL's own ``VLLMGeneration.generate`` and ``sync_weights`` (their sleep, wake and
weight-push logic) with only the engine object replaced by a recorder (vLLM is not in
this env; ``tests/vllm`` runs the same count on the real engine). Every parameter pushed
goes through ``DistributedBackend.gather_params``, the collective gather under ZeRO-3, so
the count of gathers is what must agree across ranks.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from gem_trl import GemRollout, build_tiny_tokenizer, episode_key
from gem_trl.testing import sleeping_colocate_engine, trainer_on
from hypothesis import given, settings
from hypothesis import strategies as st
from trl.generation import vllm_generation

ENV_ID = "core:NumberGuess-v0"


@pytest.fixture(autouse=True)
def _sampling_params(monkeypatch: pytest.MonkeyPatch) -> None:
    # vllm.SamplingParams, imported by TRL's module only when vLLM is installed
    if not hasattr(vllm_generation, "SamplingParams"):
        monkeypatch.setattr(vllm_generation, "SamplingParams", SimpleNamespace, raising=False)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tiny_tokenizer()


def play_one_rank(tokenizer: Any, episodes: int, max_turns: int) -> Any:
    engine = sleeping_colocate_engine(tokenizer)
    trainer = trainer_on(engine, tokenizer)
    rollout = GemRollout(max_turn_tokens=4, max_turns=max_turns)
    out = rollout([episode_key(ENV_ID, seed) for seed in range(episodes)], trainer)
    assert max(out["num_turns"]) == max_turns  # "50" rarely wins: the episodes run several turns
    return engine


def test_a_multi_turn_rollout_wakes_syncs_and_sleeps_once(tokenizer: Any) -> None:
    engine = play_one_rank(tokenizer, episodes=3, max_turns=4)
    llm = engine.llm
    assert llm.calls == [
        "wake_up(weights)",
        "reset_prefix_cache",
        "wake_up(kv_cache)",
        "generate",
        "generate",
        "generate",
        "generate",
        "sleep(2)",
    ]
    assert llm.loaded == ["weight", "bias"]  # one push of every parameter
    assert engine._dist.gathers == 2
    assert engine.enable_sleep_mode and engine._llm_weights_sleeping  # left as TRL leaves it after generate


def test_without_the_rollout_guard_trl_syncs_every_turn(tokenizer: Any) -> None:
    """The defect: TRL's generate alone pushes all weights before each turn (what vllm_awake prevents)."""
    engine = sleeping_colocate_engine(tokenizer)
    for _ in range(3):
        engine.generate(prompts=[[1, 2]], images=None, num_generations=1)
    assert engine.llm.calls.count("wake_up(weights)") == 3 and engine._dist.gathers == 6


@settings(max_examples=8, deadline=None)
@given(
    ranks=st.lists(
        st.tuples(st.integers(min_value=1, max_value=3), st.integers(min_value=1, max_value=4)), min_size=2, max_size=3
    )
)
def test_ranks_with_different_episode_lengths_make_the_same_gathers(tokenizer: Any, ranks: list[Any]) -> None:
    """Whatever each rank's episodes and turns, every rank gathers each parameter once per rollout."""
    engines = [play_one_rank(tokenizer, episodes, max_turns) for episodes, max_turns in ranks]
    assert {e._dist.gathers for e in engines} == {2}
    assert {(e.llm.calls.count("wake_up(weights)"), e.llm.calls.count("sleep(2)")) for e in engines} == {(1, 1)}


def test_engine_without_sleep_mode_is_left_alone(tokenizer: Any) -> None:
    engine = sleeping_colocate_engine(tokenizer)
    engine.enable_sleep_mode = False
    engine._llm_weights_sleeping = False
    trainer = trainer_on(engine, tokenizer)
    GemRollout(max_turn_tokens=4, max_turns=2)([episode_key(ENV_ID, 0)], trainer)
    assert set(engine.llm.calls) == {"generate"} and engine._dist.gathers == 0
