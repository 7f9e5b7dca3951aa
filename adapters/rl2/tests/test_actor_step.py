"""RL2's trainer step past the rollout: its advantage step, then its own ``Actor.update`` on a tiny model, on the CPU.

Each step is RL2's ``Rollout`` over gem episodes (stand-in SGLang server, see
:mod:`rl2_harness`), ``compute_advantages`` as gem's launcher installs it (``rebn``),
then ``RL2.workers.actor.Actor.update``: its ``data_manager`` (minibatch packing, scatter
over the data-parallel mesh), ``count_total``, ``sequence_parallelism_manager``,
``forward`` (logsumexp, action logits, entropy), the PPO loss, ``aggregate_values``,
backward and ``optimizer_step``. Stand-ins: the model is a tiny Qwen2 with SDPA attention
and no FSDP wrapping (RL2 loads it with flash-attention 2 and wraps it in FSDP on GPUs),
``torch.cuda.current_device`` is the CPU, and ring-flash-attention's varlen bookkeeping
(used only by flash-attention kernels) is a no-op. One rank (gloo).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from gem_rl2.train import install_step_guards
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rl2_harness import rl2_config, run_rollout
from standins import StandInSGLang
from test_advantages import batch_st, rl2_batch

import gem_core
from gem_core.conformance import CASES, scripted_generation
from gem_core.testing_models import build_tiny_model

pytestmark = pytest.mark.usefixtures("rl2_process_group", "event_loop_set")
CASE = CASES[0]  # NumberGuess bisection, chatml
FAULTY = "test:RL2ActorFaulty-v0"


@pytest.fixture
def actor(monkeypatch: pytest.MonkeyPatch) -> Any:
    """RL2's ``Actor`` as its ``__init__`` leaves it, with a tiny CPU model in place of the FSDP one."""
    import RL2.utils.sequence_parallelism as sequence_parallelism
    import RL2.workers.actor as actor_module
    import torch.distributed as dist
    from omegaconf import OmegaConf

    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    monkeypatch.setattr(
        sequence_parallelism,
        "llama3_flash_attn_prepare_cu_seqlens",
        lambda cu_seqlens, causal, rank, world_size: (cu_seqlens, cu_seqlens, 0, 0, slice(None)),
    )
    monkeypatch.setattr(actor_module, "count_total", actor_module.count_total)  # the guard is undone afterwards
    tokenizer = CASE.tokenizer()
    torch.manual_seed(0)
    rl2 = rl2_config(["actor.model_name=tiny", "actor.max_length_per_device=8192", "rollout.max_turns=8"])
    OmegaConf.resolve(rl2)
    actor = actor_module.Actor.__new__(actor_module.Actor)  # its __init__ loads flash-attention and FSDP
    actor.config, actor.train = rl2.actor, True
    actor.config.offload_model = actor.config.offload_optimizer = False  # no FSDP handles to move
    actor.device_mesh = dist.device_mesh.init_device_mesh("cpu", (1, 1, 1), mesh_dim_names=("dp", "sp", "tp"))
    actor.dp_size = 1
    # torch left seeded as before: the steps' own draws follow from it
    actor.model = build_tiny_model(tokenizer, seed=0, restore_rng=False, attention="sdpa", tie_word_embeddings=True)
    actor.optimizer = torch.optim.AdamW(actor.model.parameters(), lr=1e-2, weight_decay=0)
    actor.scheduler = torch.optim.lr_scheduler.LambdaLR(actor.optimizer, lambda _: 1.0)
    actor.module = actor_module
    return actor


def weights(model: Any) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()]).clone()


def recorded_losses(actor: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[torch.Tensor, float]]:
    """Per minibatch of ``Actor.update``: the per-token losses on action tokens, and the divisor RL2 used."""
    seen: list[tuple[torch.Tensor, float]] = []
    original = actor.module.aggregate_values

    def aggregate_values(tensor: Any, action_mask: Any, avg_level: str, total_actions: Any, total_sequences: Any):
        losses = tensor[0]
        seen.append((losses.detach()[action_mask.bool()], float(total_actions)))
        return original(tensor, action_mask, avg_level, total_actions, total_sequences)

    monkeypatch.setattr(actor.module, "aggregate_values", aggregate_values)
    return seen


def rollout(tmp_path: Path, seeds: list[int], env_id: str = CASE.env_id, env_kwargs: dict | None = None) -> Any:
    tokenizer = CASE.tokenizer()
    with StandInSGLang(tokenizer, lambda ids, m: scripted_generation(CASE, tokenizer, ids, m)) as server:
        return run_rollout(
            tmp_path,
            tokenizer,
            server.url,
            env_id=env_id,
            seeds=seeds,
            max_turns=8,
            max_new_tokens=16,
            env_kwargs=env_kwargs,
            extra_overrides=["adv.gamma=0.9"],  # per-turn discount: the turns' returns (and advantages) differ
        )


@pytest.mark.slow
def test_several_steps_each_train_on_exactly_their_turns(actor: Any, tmp_path: Path, monkeypatch) -> None:
    """Steps of 3, 1 and 3 episodes: every action token of the step is in the loss once, with its ReBN advantage."""
    seen = recorded_losses(actor, monkeypatch)
    for step, seeds in enumerate([[0, 1, 2], [3], [4, 5, 6]], start=1):
        result = rollout(tmp_path / f"step{step}", seeds)
        td = result.tensor_dict
        assert len(result.cu_seqs) - 1 == len(seeds)
        mask = td["action_mask"].bool()
        advantages = td["advantages"][mask]
        seen.clear()
        before = weights(actor.model)
        actor.update(td, step)
        trained = torch.cat([losses for losses, _ in seen])
        # first update on a fresh batch: ratio 1, so each token's loss is minus its advantage
        assert sorted((-trained).tolist()) == pytest.approx(sorted(advantages.tolist()), abs=1e-5)
        assert all(total == float(mask.sum()) for _, total in seen)  # RL2's divisor: the step's action tokens
        after = weights(actor.model)
        assert torch.isfinite(after).all() and not torch.equal(before, after)


@pytest.mark.slow
def test_a_step_whose_episodes_all_failed_trains_nothing_and_stays_finite(
    actor: Any, tmp_path: Path, monkeypatch
) -> None:
    """Zero trainable episodes: gem zeroes the failed episodes' masks; RL2 would divide the loss by 0 actions."""
    from gem_core.testing import faulty_number_guess

    gem_core.register(FAULTY, faulty_number_guess, kwargs={"fail_at": 1, "error": "TimeoutError"}, override=True)
    result = rollout(tmp_path / "failed", [0, 1, 2], env_id=FAULTY)
    td = result.tensor_dict
    assert not td["action_mask"].any()  # every episode failed: nothing to train on

    unguarded = {k: v.clone() for k, v in td.items()}
    before = weights(actor.model)
    actor.update(unguarded, 1)
    assert not torch.isfinite(weights(actor.model)).all()  # RL2 as shipped: 0/0, NaN weights

    sizes = [p.numel() for p in actor.model.parameters()]
    for parameter, value in zip(actor.model.parameters(), before.split(sizes), strict=True):
        parameter.data.copy_(value.view_as(parameter))
    actor.optimizer = torch.optim.AdamW(actor.model.parameters(), lr=1e-2, weight_decay=0)
    actor.scheduler = torch.optim.lr_scheduler.LambdaLR(actor.optimizer, lambda _: 1.0)
    install_step_guards(actor.module)  # what gem-rl2-train installs
    actor.update(td, 1)
    assert torch.equal(weights(actor.model), before)  # an empty update, not NaN


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=batch_st, updates=st.sampled_from([1, 2]), max_length=st.sampled_from([40, 4096]))
def test_any_batch_split_trains_each_action_token_once(
    actor: Any, batch: list, updates: int, max_length: int, monkeypatch
) -> None:
    """Whatever RL2's packing does (several updates per rollout, several minibatches), each token is in one loss."""
    tensor_dict = rl2_batch(batch)[0]
    vocab = actor.model.config.vocab_size
    tensor_dict["states"] %= vocab
    tensor_dict["actions"] %= vocab
    tensor_dict["advantages"] = (
        torch.arange(1, tensor_dict["action_mask"].numel() + 1, dtype=torch.float32).view(
            tensor_dict["action_mask"].shape
        )
        * tensor_dict["action_mask"]
    )  # every token's advantage names it
    if updates > len(tensor_dict["states"]):
        updates = 1
    actor.config.update_per_rollout, actor.config.max_length_per_device = updates, max_length
    seen = recorded_losses(actor, monkeypatch)
    want = sorted(tensor_dict["advantages"][tensor_dict["action_mask"].bool()].tolist())
    actor.update(tensor_dict, 1)
    got = sorted((-torch.cat([losses for losses, _ in seen])).tolist())
    assert got == pytest.approx(want, rel=1e-6)


def test_rl2s_sequence_average_cannot_update(actor: Any) -> None:
    """Why the launcher refuses ``actor.avg_level=sequence``: RL2 0.0.2's update averages its bool clip flags."""
    tensor_dict = rl2_batch([[[(2, 2, 1.0)]]])[0]
    tensor_dict["advantages"] = tensor_dict["action_mask"].float()
    actor.config.avg_level = "sequence"
    with pytest.raises(TypeError, match="finfo"):
        actor.update(tensor_dict, 1)
