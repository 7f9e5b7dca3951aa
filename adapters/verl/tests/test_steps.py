"""verl's own training step past the rollout, several steps in a row: replay buffer (DAPO on), advantage, loss, metrics.

Each step does what verl 0.9.1's v1 ``PPOTrainer.fit`` does after the rollout, with verl's
code: ``ReplayBuffer.sample`` (sync mode; with ``algorithm.filter_groups`` it evicts the
groups whose episodes do not differ and calls the trainer's refill for new prompts),
``PPOTrainer._compute_advantage`` (``rebn`` through gem's hook), the actor's loss
(``verl.workers.utils.losses.ppo_loss``: verl's policy loss and ``agg_loss`` with the
global batch sizes its engine computes), ``PPOTrainer._compute_metrics`` and the clean-up
of the consumed keys. Rollouts are gem's loop against the stand-in server, stored by
verl's v1 worker (see ``verl_harness``). Steps carry odd, one and zero trainable episodes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
import verl.trainer.ppo.v1.replay_buffer as replay_buffer
from gem_verl.options import check_trainer_config
from omegaconf import OmegaConf
from scripted_groups import BASE_CASE, Move, Script, expected_metrics, loop_config, play_group, register
from tensordict import TensorDict
from verl.trainer.ppo.v1.utils import MetricsAggregator
from verl.utils import tensordict_utils as tu
from verl.workers.utils.losses import ppo_loss
from verl_harness import Storage, compute_advantage, compute_metrics

from gem_core.errors import RLInputError

WIN = Move(reward=1, end=True, win=True)
LOSE = Move(reward=0, end=True)
SLOW_WIN: Script = (Move(reward=0), Move(reward=0), WIN)
BOOM: Script = (Move(kind="boom"),)


@dataclasses.dataclass
class Run:
    """A verl training run's state between steps: the store, the replay buffer, the prompts still to come."""

    layout: str
    n: int
    metric: str | None
    tokenizer: Any
    prompts: Iterator[list[Script]]
    storage: Storage = dataclasses.field(default_factory=Storage)
    step_no: int = 0
    dispatched: int = 0

    def __post_init__(self) -> None:
        overrides: dict[str, Any] = {"actor_rollout_ref.rollout.n": self.n}
        if self.metric is not None:
            overrides |= {"algorithm.filter_groups.enable": True, "algorithm.filter_groups.metric": self.metric}
        self.cfg = loop_config(self.layout, **overrides)
        check_trainer_config(self.cfg)  # what the driver checks before any model loads

    def refill(self, count: int) -> int:
        """The trainer's ``_add_prompts_to_generate``: the next prompts, played at once (a synchronous rollout)."""
        for _ in range(count):
            scripts = next(self.prompts)
            assert len(scripts) == self.n
            self.dispatched += 1
            play_group(
                self.storage, self.cfg, self.tokenizer, f"p{self.dispatched}", scripts, global_steps=self.step_no
            )
        return count

    def step(self, groups: int) -> dict[str, Any]:
        """One ``fit`` iteration past the rollout; returns verl's step metrics plus the loss and its gradient."""
        self.step_no += 1
        buffer = replay_buffer.ReplayBuffer(
            trainer_mode="sync",
            trainer_config={},
            max_off_policy_threshold=None,
            max_off_policy_strategy="drop",
            sampler_kwargs={},
            poll_interval=0.0,
            refill_fn=self.refill,
            filter_groups_metric=self.metric,
            train_batch_size=groups,
            gen_batch_size=1,
            max_inflight_gen_batches=1,
        )
        saved = replay_buffer.tq
        replay_buffer.tq = self.storage
        try:
            self.refill(groups)  # the step's dataloader batch
            batch, sample_metrics = buffer.sample(global_steps=self.step_no, partition_id="train", batch_size=groups)
        finally:
            replay_buffer.tq = saved
        aggregator = MetricsAggregator()  # verl's step() sums the eviction counts of its sample calls this way
        aggregator.add_step_metrics(sample_metrics, sample_count=len(batch.keys))
        metrics = aggregator.get_aggregated_metrics()
        try:
            metrics |= compute_advantage(self.storage, self.cfg, batch.keys)[0]
            metrics |= self._loss(batch.keys)
            metrics |= compute_metrics(self.storage, self.cfg, batch.keys, global_steps=self.step_no)
        finally:
            self.storage.kv_clear(keys=batch.keys, partition_id="train")  # verl's fit: the step's keys go
        metrics["keys"] = batch.keys
        return metrics

    def _loss(self, keys: list[str]) -> dict[str, Any]:
        """The actor's ``ppo_loss`` on the batch, as verl's FSDP engine calls it (one data-parallel rank)."""
        fields = ["prompts", "responses", "response_mask", "advantages", "rollout_log_probs"]
        stored = self.storage.kv_batch_get(keys=keys, partition_id="train", select_fields=fields)
        old = stored["rollout_log_probs"]
        # The new policy's log-probs, a little off the old ones: the model's output over each whole sequence,
        # shifted left by one (position t scores token t + 1), as verl's engine returns it.
        shift = torch.full((int(old.values().numel()),), 0.01, requires_grad=True)
        rows, start = [], 0
        for prompt, old_row in zip(stored["prompts"].unbind(), old.unbind(), strict=True):
            new_row = old_row + shift[start : start + len(old_row)]
            rows.append(torch.cat([torch.zeros(len(prompt) - 1), new_row, torch.zeros(1)]))
            start += len(old_row)
        data = TensorDict(
            {
                "prompts": stored["prompts"],
                "responses": stored["responses"],
                "response_mask": stored["response_mask"],
                "advantages": stored["advantages"],
                "old_log_probs": old,
            },
            batch_size=len(keys),
        )
        # what verl's engine assigns before the loss (forward_backward_batch, one data-parallel rank)
        tu.assign_non_tensor(
            data, batch_num_tokens=int(data["response_mask"].values().sum()), dp_size=1, global_batch_size=len(keys)
        )
        actor = OmegaConf.create(
            {
                "clip_ratio": 0.2,
                "clip_ratio_low": 0.2,
                "clip_ratio_high": 0.28,
                "clip_ratio_c": 3.0,
                "loss_agg_mode": self.loss_agg_mode,
                "loss_scale_factor": None,
                "policy_loss": {"loss_mode": "vanilla"},
                "use_kl_loss": False,
                "global_batch_info": {},
            }
        )
        log_probs = torch.nested.as_nested_tensor(rows, layout=torch.jagged)
        loss, _ = ppo_loss(actor, {"log_probs": log_probs}, data)
        loss.backward()
        assert shift.grad is not None
        return {"loss": float(loss.detach()), "grad_finite": bool(torch.isfinite(shift.grad).all())}

    loss_agg_mode: str = "token-mean"


def _prompts(*groups: list[Script]) -> Iterator[list[Script]]:
    yield from groups
    raise AssertionError("the run asked for more prompts than the test has")


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    register()
    return BASE_CASE.tokenizer()


@pytest.mark.parametrize("layout", ["sequence", "transition"], ids=["per-episode", "per-transition"])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_dapo_steps_evict_refill_and_train_on_exactly_the_kept_groups(tokenizer: Any, layout: str, mode: str) -> None:
    """rollout.n=3 (an odd number of episodes per group), DAPO on ``success``: four steps in a row."""
    mixed = [(WIN,), (LOSE,), SLOW_WIN]
    run = Run(
        layout,
        n=3,
        metric="success",
        tokenizer=tokenizer,
        prompts=_prompts(
            mixed,  # step 1: p1
            mixed,  # step 2: p2 kept, p3 evicted (every episode lost), two refills (verl's sync rule): p4, p5
            [(LOSE,), (LOSE,), (LOSE,)],
            [(LOSE,), SLOW_WIN, (WIN,)],
            [(LOSE,), (LOSE,), (WIN,)],
            # step 3: p6, every env fails: no spread, evicted; one refill at a time (verl's in-flight bound is
            # one batch): p7, every episode won, evicted; p8 kept
            [BOOM, BOOM, BOOM],
            [(WIN,), (WIN,), (WIN,)],
            mixed,
            [(WIN,), BOOM, (LOSE,)],  # step 4: p9, one env fails, the group still differs
        ),
    )
    run.loss_agg_mode = mode
    seen: set[str] = set()

    first = run.step(groups=1)
    assert first["grad_finite"] and np.isfinite(first["loss"]) and first["loss"] != 0.0
    assert _groups(first) == {"p1"} and len(first["keys"]) == _samples(layout, mixed)
    seen |= set(first["keys"])

    second = run.step(groups=2)
    assert second["training/filter_groups/evicted_samples"] == 1
    assert second["_dapo_filtered_reward_counts"] == {0.0: 1}  # the group collapsed to success=0
    assert second["training/filter_groups/discarded_surplus_samples"] == 1  # 3 kept groups, 2 trained
    assert len(_groups(second)) == 2 and "p3" not in _groups(second) and second["grad_finite"]
    assert not seen & set(second["keys"])  # verl's clean-up: a step never trains on an earlier step's samples
    seen |= set(second["keys"])

    third = run.step(groups=1)  # the first poll kept no group at all
    assert _groups(third) == {"p8"} and third["training/filter_groups/evicted_samples"] == 2
    assert third["_dapo_filtered_reward_counts"] == {0.0: 1, 1.0: 1} and third["gem/env_errors"] == 0.0

    fourth = run.step(groups=1)
    assert _groups(fourth) == {"p9"} and fourth["gem/env_errors"] == 1.0 and fourth["grad_finite"]
    assert np.isfinite(fourth["critic/advantages/mean"]) and not seen & set(fourth["keys"])
    assert not run.storage.samples and not run.storage.tags  # every trained, evicted or surplus group is gone


def test_single_episode_steps_and_a_step_with_no_trainable_episode(tokenizer: Any) -> None:
    """rollout.n=1, rebn: one episode per step; a step whose one env fails is a typed error, then the run goes on."""
    run = Run("sequence", n=1, metric=None, tokenizer=tokenizer, prompts=_prompts([SLOW_WIN], [BOOM], [(LOSE,)]))
    first = run.step(groups=1)
    assert len(first["keys"]) == 1 and first["grad_finite"] and first["training/num_turns/mean"] == 2 * 3
    with pytest.raises(RLInputError, match="no trainable token"):
        run.step(groups=1)  # verl's loss would be 0/0: NaN weights without an error
    third = run.step(groups=1)  # one single-turn episode: rebn's std is 0, so its advantage is 0
    assert third["grad_finite"] and third["loss"] == 0.0 and third["gem/env_errors"] == 0.0


def _groups(metrics: dict[str, Any]) -> set[str]:
    return {key.split("_")[0] for key in metrics["keys"]}


def _samples(layout: str, scripts: list[Script]) -> int:
    if layout == "sequence":
        return len(scripts)
    return int(sum(expected_metrics(s)["num_turns"] or 1 for s in scripts))
