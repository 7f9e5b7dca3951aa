"""A real ``GRPOTrainer.train()`` on the CPU: tiny local model, multi-turn env, a history-rewriting template, ReBN."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pytest
import torch
from gem_trl import GemGRPOConfig, GemGRPOTrainer, build_tiny_model, episode_key, make_prompt_dataset
from gem_trl.testing import scripted_model_generate

from gem_core.conformance import ConformanceCase
from gem_core.episode import EpisodeLimits
from gem_core.rl.advantages import rebn
from gem_core.rl.returns import discounted_returns
from gem_core.testing_tokenizers import build_chat_tokenizer

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ENV_ID = "core:NumberGuess-v0"


class RecordingTrainer(GemGRPOTrainer):
    """Keeps every generation batch as the loss will see it (before TRL shuffles it)."""

    records: list[tuple[list[dict[str, Any]], dict[str, Any]]]

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        self.records.append(([dict(x) for x in inputs], {k: v for k, v in out.items()}))
        return out


def _config(tmp_path: Any, **overrides: Any) -> GemGRPOConfig:
    settings: dict[str, Any] = {
        "output_dir": str(tmp_path),
        "use_cpu": True,
        "bf16": False,
        "report_to": "none",
        "save_strategy": "no",
        "logging_steps": 1,
        "max_steps": 2,
        "per_device_train_batch_size": 4,
        "num_generations": 2,
        "learning_rate": 5e-3,
        "max_completion_length": 96,
        "max_turn_tokens": 6,
        "max_turns": 3,
        "gamma": 0.9,
        "seed": 0,
        "disable_tqdm": True,
    }
    settings.update(overrides)
    return GemGRPOConfig(**settings)


def _train(tmp_path: Any, **overrides: Any) -> RecordingTrainer:
    # Qwen3-style: drops earlier <think> blocks from the history, which the engine never re-renders
    tokenizer = build_chat_tokenizer("chatml_drop_think")
    model = build_tiny_model(tokenizer, seed=0)
    trainer = RecordingTrainer(
        model=model,
        args=_config(tmp_path, **overrides),
        train_dataset=make_prompt_dataset(ENV_ID, 8),
        processing_class=tokenizer,
        env_kwargs={"max_turns": 3},
    )
    trainer.records = []
    return trainer


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[RecordingTrainer, dict[str, torch.Tensor]]:
    trainer = _train(tmp_path_factory.mktemp("rebn"))
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()
    return trainer, before


def test_trains_at_least_two_steps_with_finite_loss(trained: Any) -> None:
    trainer, _ = trained
    assert trainer.state.global_step == 2
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 2
    assert all(math.isfinite(loss) for loss in losses)


def test_weights_changed(trained: Any) -> None:
    trainer, before = trained
    changed = [name for name, p in trainer.model.named_parameters() if not torch.equal(p.detach(), before[name])]
    assert changed, "no parameter moved during training"


def test_episodes_are_multi_turn_with_a_history_rewriting_template(trained: Any) -> None:
    trainer, _ = trained
    assert trainer.rollout_func.engine.renderer.rewrites_history
    turns = [x["num_turns"] for inputs, _ in trainer.records for x in inputs]
    assert max(turns) > 1
    for inputs, _ in trainer.records:
        for x in inputs:
            assert x["episode"].start_state_id == x["prompt"].replace("#", "/seed=")
            assert x["truncated"] == x["episode"].truncated


def test_advantages_are_core_rebn_of_per_turn_returns(trained: Any) -> None:
    trainer, _ = trained
    assert len(trainer.records) == 2
    for inputs, out in trainer.records:
        returns = [discounted_returns(x["turn_rewards"], 0.9) for x in inputs]
        per_turn = np.split(rebn(np.concatenate(returns)), np.cumsum([len(r) for r in returns])[:-1])
        advantages = out["advantages"]
        assert advantages.shape == out["completion_ids"].shape
        for row, (x, adv) in enumerate(zip(inputs, per_turn, strict=True)):
            expected = torch.zeros(advantages.shape[1])
            for (start, end), a in zip(x["turn_spans"], adv, strict=True):
                expected[start:end] = float(a)
            torch.testing.assert_close(advantages[row], expected, rtol=1e-5, atol=1e-6)


def test_logged_advantages_are_the_ones_used(trained: Any) -> None:
    trainer, _ = trained
    _, out = trainer.records[-1]  # TRL's completions log holds the latest generation batch
    mask = (out["completion_mask"] * out["tool_mask"]).float()
    used = (out["advantages"] * mask).sum(1) / mask.sum(1).clamp(min=1)
    assert list(trainer._logs["advantages"]) == pytest.approx(used.tolist(), abs=1e-6)


def test_env_mask_is_one_exactly_on_generated_tokens(trained: Any) -> None:
    trainer, _ = trained
    for inputs, out in trainer.records:
        loss_mask = out["completion_mask"] * out["tool_mask"]
        for row, x in enumerate(inputs):
            episode = x["episode"]
            expected = torch.zeros(loss_mask.shape[1], dtype=loss_mask.dtype)
            for (start, end), turn in zip(x["turn_spans"], episode.turns, strict=True):
                expected[start:end] = 1
                # the masked-in tokens are the ids the model sampled, unchanged
                assert out["completion_ids"][row, start:end].tolist() == turn.action_token_ids
            assert torch.equal(loss_mask[row], expected)
            # every env observation after the first sits in the completion, under mask 0
            tokenizer = trainer.processing_class
            env_text = tokenizer.decode(
                out["completion_ids"][row][(loss_mask[row] == 0) & (out["completion_mask"][row] == 1)]
            )
            for turn in episode.turns[:-1]:
                assert turn.next_observation in env_text


def test_grpo_stays_selectable(tmp_path: Any) -> None:
    trainer = _train(tmp_path, advantage_estimator="grpo", max_steps=1)
    trainer.train()
    ((inputs, out),) = trainer.records
    assert out["advantages"].dim() == 1  # TRL's own per-completion group advantage
    returns = torch.tensor([x["episode_return"] for x in inputs])
    grouped = returns.view(-1, 2)
    expected = (grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)
    torch.testing.assert_close(out["advantages"], expected.flatten().float(), rtol=1e-4, atol=1e-5)


def _reply_cut_when_higher(turn: int, text: str) -> str:
    """Guess 8 and stop; after "higher" the next reply runs past its token limit (cut), after "lower" it stops."""
    if turn == 0:
        return "My guess is 8"
    return "My guess is 1111111111111111" if "higher" in text else "My guess is 4"


MASK_CASE = ConformanceCase(
    name="cut-last-turn",
    env_id=ENV_ID,
    seeds=tuple(range(8)),
    template="chatml",
    limits=EpisodeLimits(max_turns=2, max_turn_tokens=12, max_episode_tokens=128),
    gamma=0.9,
    reply=_reply_cut_when_higher,
)


@pytest.mark.parametrize("mask_truncated", [True, False], ids=["masked", "not-masked"])
def test_mask_truncated_completions_and_rebn_statistics_agree(tmp_path: Any, mask_truncated: bool) -> None:
    """Episodes TRL drops from the loss (last turn cut) are dropped from the ReBN mean and std too."""
    tokenizer = MASK_CASE.tokenizer()
    n = len(MASK_CASE.seeds)
    args = _config(
        tmp_path,
        per_device_train_batch_size=n,
        num_generations=n,
        max_turns=2,
        max_turn_tokens=12,
        max_completion_length=128,
        mask_truncated_completions=mask_truncated,
    )
    dataset = make_prompt_dataset(ENV_ID, n)
    trainer = GemGRPOTrainer(
        model=build_tiny_model(tokenizer), args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.model.train()
    trainer.model.generate = scripted_model_generate(MASK_CASE, tokenizer)  # type: ignore[method-assign]
    inputs = [{"prompt": episode_key(ENV_ID, seed)} for seed in MASK_CASE.seeds]
    out = trainer._generate_and_score_completions(inputs)
    cut_last = [x["episode"].turns[-1].stop_reason == "length" for x in inputs]
    assert 0 < sum(cut_last) < n  # a mix: some episodes end on a cut reply
    in_loss = (out["completion_mask"] * out["tool_mask"]).sum(1) > 0
    assert in_loss.tolist() == [not (mask_truncated and c) for c in cut_last]
    kept = [discounted_returns(x["turn_rewards"], 0.9) for x, k in zip(inputs, in_loss, strict=True) if k]
    expected = iter(np.split(rebn(np.concatenate(kept)), np.cumsum([len(r) for r in kept])[:-1]))
    for row, x in enumerate(inputs):
        if not in_loss[row]:
            assert not out["advantages"][row].any()
            continue
        for (start, end), a in zip(x["turn_spans"], next(expected), strict=True):
            torch.testing.assert_close(out["advantages"][row, start:end], torch.full((end - start,), float(a)))


@pytest.fixture
def faulty_env_ids() -> list[str]:
    """Two envs that raise: in ``reset``, and in the second ``step`` (after one turn was played)."""
    import gem_core
    from gem_core.testing import faulty_number_guess

    ids = {"test:FaultyReset-v0": 0, "test:FaultyStep-v0": 2}
    for env_id, fail_at in ids.items():
        kwargs = {"fail_at": fail_at, "error": "TimeoutError"}
        gem_core.register(env_id, faulty_number_guess, kwargs=kwargs, override=True)
    return list(ids)


def test_a_batch_with_failing_envs_trains_and_gives_them_no_weight(
    tmp_path: Any, faulty_env_ids: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """One env that raises ends only its own episode: the step trains, the episode has no loss weight, it is counted."""
    tokenizer = build_chat_tokenizer("chatml_drop_think")
    args = _config(tmp_path, max_steps=1, per_device_train_batch_size=6, num_generations=2)
    trainer = RecordingTrainer(
        model=build_tiny_model(tokenizer, seed=0),
        args=args,
        train_dataset=make_prompt_dataset([ENV_ID, *faulty_env_ids], 1),
        processing_class=tokenizer,
        env_kwargs={"max_turns": 3},
    )
    trainer.records = []
    with caplog.at_level("WARNING", logger="gem_trl"):
        trainer.train()
    assert trainer.state.global_step == 1
    assert all(math.isfinite(e["loss"]) for e in trainer.state.log_history if "loss" in e)
    ((inputs, out),) = trainer.records
    failed = [x["env_error"] is not None for x in inputs]
    assert failed == [x["prompt"].split("#")[0] in faulty_env_ids for x in inputs] and sum(failed) == 4
    loss_mask = out["completion_mask"] * out["tool_mask"]
    survivors = [x for x, f in zip(inputs, failed, strict=True) if not f]
    returns = [discounted_returns(x["turn_rewards"], 0.9) for x in survivors]
    expected = iter(np.split(rebn(np.concatenate(returns)), np.cumsum([len(r) for r in returns])[:-1]))
    for row, x in enumerate(inputs):
        if failed[row]:
            assert not loss_mask[row].any() and not out["advantages"][row].any()
            assert x["env_error"].startswith("TimeoutError: FaultyEnv: injected failure")
            assert x["num_turns"] == (1 if "Step" in x["prompt"] else 0)  # the turns before the failure are kept
            continue
        for (start, end), a in zip(x["turn_spans"], next(expected), strict=True):
            torch.testing.assert_close(out["advantages"][row, start:end], torch.full((end - start,), float(a)))
    logged = [e["gem/env_errors"] for e in trainer.state.log_history if "gem/env_errors" in e]
    assert logged == [4.0]
    (warning,) = [r.getMessage() for r in caplog.records if "env error" in r.getMessage()]
    assert "4 of 6 episodes" in warning and "test:FaultyStep-v0 seed=0 in step: TimeoutError" in warning


def test_on_env_error_raise_stops_the_step(tmp_path: Any, faulty_env_ids: list[str]) -> None:
    tokenizer = build_chat_tokenizer("chatml")
    args = _config(tmp_path, max_steps=1, per_device_train_batch_size=2, on_env_error="raise")
    trainer = GemGRPOTrainer(
        model=build_tiny_model(tokenizer),
        args=args,
        train_dataset=make_prompt_dataset(faulty_env_ids[1], 1),
        processing_class=tokenizer,
    )
    with pytest.raises(TimeoutError, match="injected failure in step 2"):
        trainer.train()


def test_steps_where_no_episode_reaches_the_loss_train_on_nothing(tmp_path: Any, faulty_env_ids: list[str]) -> None:
    """Zero episodes in the loss (every env failed in reset): the steps run, the loss is 0 and no weight moves."""
    tokenizer = build_chat_tokenizer("chatml_drop_think")
    trainer = RecordingTrainer(
        model=build_tiny_model(tokenizer, seed=0),
        args=_config(tmp_path, max_steps=2, per_device_train_batch_size=3, num_generations=3),
        train_dataset=make_prompt_dataset(faulty_env_ids[0], 4),
        processing_class=tokenizer,
    )
    trainer.records = []
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()
    assert trainer.state.global_step == 2 and len(trainer.records) == 2
    for inputs, out in trainer.records:
        assert all(x["env_error"] is not None for x in inputs)
        assert not (out["completion_mask"] * out["tool_mask"]).any() and not out["advantages"].any()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses == [0.0, 0.0]
    assert all(torch.equal(p.detach(), before[name]) for name, p in trainer.model.named_parameters())


def _count_model_work(tmp_path: Any, estimator: str) -> tuple[int, int]:
    """Forward passes and tokens forwarded by the policy over one training step (rollout, log-probs, loss)."""
    trainer = _train(tmp_path, advantage_estimator=estimator, max_steps=1)
    work = [0, 0]

    def count(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        work[0] += 1
        work[1] += 0 if ids is None else ids.numel()

    trainer.model.register_forward_pre_hook(count, with_kwargs=True)
    trainer.train()
    return work[0], work[1]


def test_rebn_adds_no_model_work_to_a_step(tmp_path: Any) -> None:
    # Same seed and policy: the first step plays the same episodes; ReBN only re-weights their tokens.
    rebn_work = _count_model_work(tmp_path / "rebn", "rebn")
    assert rebn_work == _count_model_work(tmp_path / "grpo", "grpo")
    assert rebn_work[0] > 1
