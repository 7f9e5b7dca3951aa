"""``gem_env_agent`` through verl 0.9.1's fully-async and one-step-off trainers, with their own code.

Both trainers run agent loops in verl's *legacy* ``AgentLoopWorker`` (a padded
``DataProto``) and compute advantages with ``ray_trainer.compute_advantage``. Here, all
verl's: the rollouter's ``prepare_single_generation_data``, ``AgentLoopWorker.generate_sequences``
(its ``_run_agent_loop`` builds the loop from the registry, ``_agent_loop_postprocess``
pads, ``_postprocess`` batches), ``RolloutSample`` pickled through the ``MessageQueue``
class, the trainer's ``_get_samples_from_queue`` and ``assemble_batch_from_rollout_samples``,
``_fit_compute_reward``, and ``_fit_compute_advantage`` (verl's rollout correction in decoupled
mode, then ``compute_advantage``); the one-step-off trainer's ``_async_gen_next_batch`` and
``AgentLoopManager.generate_sequences``. Stand-ins: the LLM server (``verl_harness.Server``,
its weight version advancing mid-episode as a partial rollout's would), the message queue's
Ray actor wrapper (the queue's own class runs in-process), and the actor's recomputed
``old_log_probs`` (a model forward): the rollout log-probs plus a seeded perturbation.
"""

from __future__ import annotations

import asyncio
import copy
import pickle
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf, open_dict
from verl.experimental.agent_loop.agent_loop import AgentLoopManager, AgentLoopWorker
from verl.experimental.fully_async_policy import fully_async_trainer
from verl.experimental.fully_async_policy.detach_utils import RolloutSample, prepare_single_generation_data
from verl.experimental.fully_async_policy.message_queue import MessageQueue
from verl.experimental.one_step_off_policy.ray_trainer import OneStepOffRayTrainer
from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl_harness import Server, config, row

from gem_core.conformance import CASES
from gem_core.errors import ConfigError, RLInputError
from gem_core.rl.advantages import rebn
from gem_core.rl.offpolicy import OffPolicyConfig, correct

BISECT = {case.name: case for case in CASES}["bisect"]
ENV = BISECT.env_id
TIS_CAP = 2.0
#: The fully-async trainer's class under its Ray actor wrapper.
TRAINER = fully_async_trainer.FullyAsyncTrainer.__ray_actor_class__


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return BISECT.tokenizer()


def trainer_config(n: int, rollout_rs: str | None = None, **gem: Any) -> Any:
    """The async trainers' settings on top of the harness config (decoupled rollout correction, token TIS)."""
    cfg = config(BISECT, **gem)
    with open_dict(cfg):
        rollout = cfg.actor_rollout_ref.rollout
        rollout.n = n
        rollout.top_p = 1.0
        rollout.top_k = -1
        rollout.multi_turn.enable = True
        rollout.agent = {"default_agent_loop": "gem_env_agent", "num_workers": 1}
        rollout.val_kwargs = {"top_p": 1.0, "top_k": -1, "temperature": 0}
        cfg.actor_rollout_ref.actor = {"policy_loss": {"loss_mode": "vanilla"}}
        cfg.algorithm.rollout_correction = {
            "rollout_is": "token",
            "rollout_is_threshold": TIS_CAP,
            "rollout_is_batch_normalize": False,
            "rollout_rs": rollout_rs,
            "rollout_rs_threshold": "0.5_2.0" if rollout_rs else None,
            "bypass_mode": False,
            "loss_type": "ppo_clip",
        }
        cfg.trainer.balance_batch = False
        cfg.async_training = {"partial_rollout": True}
    return cfg


def worker(cfg: Any, server: Server, tokenizer: Any) -> AgentLoopWorker:
    """The legacy ``AgentLoopWorker`` with the state its ``generate_sequences`` path reads (no Ray actor, no GPU)."""
    agent_worker = AgentLoopWorker.__new__(AgentLoopWorker)
    agent_worker.config = cfg
    agent_worker.rollout_config = cfg.actor_rollout_ref.rollout
    agent_worker.llm_client = server
    agent_worker.tokenizer = tokenizer
    agent_worker.processor = None
    agent_worker.hf_model_type = "qwen2"
    agent_worker.dataset_cls = RLHFDataset
    agent_worker.tools = []
    agent_worker.reward_loop_worker_handles = None
    agent_worker.distillation_enabled = False
    agent_worker.mm_processor_kwargs = {}
    return agent_worker


def batch_dict(seeds: list[int], start: int = 0, env_id: str = ENV, **kwargs: Any) -> dict[str, Any]:
    """A dataloader batch of rows (what verl's collate gives the rollouter), non-tensor columns only."""
    rows = [row(env_id, seed=s, index=start + i, **kwargs) for i, s in enumerate(seeds)]
    columns: dict[str, Any] = {
        name: np.array([r[name] for r in rows], dtype=object)
        for name in ("agent_name", "extra_info", "index", "raw_prompt", "data_source")
    }
    columns["dummy_tensor"] = torch.zeros((len(rows), 1), dtype=torch.uint8)  # RLHFDataset's one tensor per row
    return columns


class QueueClient:
    """``MessageQueueClient``'s two calls on verl's ``MessageQueue`` class, in-process (no Ray actor)."""

    def __init__(self, cfg: Any) -> None:
        self.queue = MessageQueue.__ray_actor_class__(cfg, max_queue_size=100)

    async def put_sample(self, sample: Any) -> bool:
        return await self.queue.put_sample(sample)

    async def get_sample(self) -> Any:
        return await self.queue.get_sample()


async def rollouter_puts(
    cfg: Any, agent_worker: AgentLoopWorker, queue: QueueClient, seed: int, step: int, **row_kwargs: Any
) -> None:
    """What ``FullyAsyncRollouter._feed_samples`` and ``_process_single_sample_streaming`` do for one row."""
    full_batch = prepare_single_generation_data(batch_dict([seed], start=seed, **row_kwargs), cfg)
    sample = RolloutSample(full_batch=full_batch, sample_id=f"sample_0_{step}", epoch=0, rollout_status={})
    sample.full_batch.non_tensor_batch["uid"] = np.array([f"uid_{sample.sample_id}"] * len(full_batch), dtype=object)
    out = await agent_worker.generate_sequences(sample.full_batch)
    out.non_tensor_batch["uid"] = np.array([f"uid_{sample.sample_id}"] * len(out), dtype=object)
    sample.full_batch = out
    assert await queue.put_sample(pickle.dumps(sample))


class Trainer:
    """The state the trainers' methods under test read (no workers, models or GPUs)."""

    use_rm = False
    kl_ctrl_in_reward = None

    def __init__(self, cfg: Any, tokenizer: Any, queue: QueueClient | None = None, required: int = 0) -> None:
        self.config = cfg
        self.tokenizer = tokenizer
        self.message_queue_client = queue
        self.required_samples = required
        self.dynamic_schedule_enabled = False
        self._step_wait_times: list[float] = []
        self._step_wait_samples: list[int] = []
        self.metrics: dict[str, Any] = {}
        self.timing_raw: dict[str, Any] = {}


def trainer_step(trainer: Trainer, batch: Any, seed: int) -> Any:
    """The trainer's reward and advantage steps; ``old_log_probs`` stands in for the actor's recomputation."""
    trainer.metrics, trainer.timing_raw = {}, {}
    batch = SeparateRayPPOTrainer._fit_compute_reward(trainer, batch)
    rollout = batch.batch["rollout_log_probs"]
    mask = batch.batch["response_mask"].bool()
    shift = torch.as_tensor(np.random.default_rng(seed).uniform(-1.2, 0.8, size=rollout.shape), dtype=rollout.dtype)
    batch.batch["old_log_probs"] = torch.where(mask, (rollout + shift).clamp(max=0.0), torch.zeros_like(rollout))
    return SeparateRayPPOTrainer._fit_compute_advantage(trainer, batch)


def expected_rebn(batch: Any, gamma: float) -> np.ndarray:
    """The core's ReBN over the turns the per-token fields name (a plain loop, not verl's or the adapter's code)."""
    rewards = batch.batch["token_level_rewards"].numpy()
    turns = batch.batch["gem_turn_ids"].numpy()
    returns: list[float] = []
    where: list[tuple[int, np.ndarray]] = []
    for r in range(turns.shape[0]):
        ids = [int(t) for t in sorted(set(turns[r].tolist())) if t >= 0]
        turn_rewards = [float(rewards[r][turns[r] == t].sum()) for t in ids]
        running = 0.0
        row_returns = []
        for reward in reversed(turn_rewards):
            running = reward + gamma * running
            row_returns.append(running)
        for t, value in zip(ids, reversed(row_returns), strict=True):
            returns.append(value)
            where.append((r, turns[r] == t))
    out = np.zeros(rewards.shape)
    for value, (r, cols) in zip(rebn(np.asarray(returns)) if returns else [], where, strict=True):
        out[r][cols] = value
    return out * batch.batch["response_mask"].numpy()


def check_batch(batch: Any, server: Server, cfg: Any) -> None:
    """Per-turn ids, versions and behaviour logprobs reached the batch; verl's IS weights and rebn are gem's."""
    mask = batch.batch["response_mask"].numpy().astype(bool)
    turns = batch.batch["gem_turn_ids"].numpy()
    versions = batch.batch["gem_policy_versions"].numpy()
    assert ((turns >= 0) == mask).all(), "turn ids sit exactly on the generated tokens"
    assert ((versions >= 0) == mask).all(), "a policy version on every generated token, -1 elsewhere"
    low, high = batch.non_tensor_batch["min_global_steps"], batch.non_tensor_batch["max_global_steps"]
    for r in range(len(batch)):
        assert low[r] <= versions[r][mask[r]].min() and versions[r][mask[r]].max() <= high[r]
        for t in set(turns[r][mask[r]].tolist()):  # one version per turn: the request's oldest
            assert len(set(versions[r][turns[r] == t].tolist())) == 1
    # per-turn rewards, each on its turn's last generated token (not the episode total on the last token)
    rewards = batch.batch["token_level_rewards"].numpy()
    for r in range(len(batch)):
        scores = batch.non_tensor_batch["turn_scores"][r]
        for t, score in enumerate(scores):
            last = np.flatnonzero(turns[r] == t)[-1]
            assert rewards[r][last] == pytest.approx(score)
        assert rewards[r].sum() == pytest.approx(sum(scores))
    # verl's token-level IS weights are gem_core's token TIS on each row (behaviour = rollout_log_probs)
    weights = batch.batch["rollout_is_weights"].numpy()
    for r in range(len(batch)):
        mine = correct(
            batch.batch["old_log_probs"][r].numpy(),
            batch.batch["rollout_log_probs"][r].numpy(),
            mask[r],
            OffPolicyConfig(tis="token", tis_cap=TIS_CAP),
        )
        np.testing.assert_allclose(weights[r][mask[r]], mine.weights[mask[r]], rtol=1e-5)
    np.testing.assert_allclose(batch.batch["advantages"].numpy(), expected_rebn(batch, cfg.algorithm.gamma), atol=1e-6)


@pytest.mark.parametrize("n", [3, 1], ids=["odd-episodes-per-row", "one-episode-per-row"])
def test_fully_async_steps_carry_turns_versions_and_behaviour_logprobs(tokenizer: Any, n: int) -> None:
    cfg = trainer_config(n)
    server = Server(BISECT, tokenizer, global_steps=7, step_every=2)  # weights move during episodes
    agent_worker = worker(cfg, server, tokenizer)
    queue = QueueClient(cfg)
    rows_per_step = 2 if n == 3 else 1
    trainer = Trainer(cfg, tokenizer, queue, required=rows_per_step)

    async def run() -> list[Any]:
        batches = []
        seed = 0
        for step in range(3):  # several steps in a row, the queue holding the rollouter's pickled samples
            for _ in range(rows_per_step):
                await rollouter_puts(cfg, agent_worker, queue, seed, step)
                seed += 1
            epoch, batch = await TRAINER._get_samples_from_queue(trainer)
            assert epoch == 0
            batches.append(trainer_step(trainer, batch, seed=step))
        await queue.put_sample(None)  # the rollouter's end signal: a step with zero episodes
        assert await TRAINER._get_samples_from_queue(trainer) == (None, None)
        return batches

    batches = asyncio.run(run())
    for batch in batches:
        assert len(batch) == rows_per_step * n
        check_batch(batch, server, cfg)
        assert "rollout_corr/rollout_is_mean" in trainer.metrics or batch.batch["rollout_is_weights"] is not None
    spans = np.concatenate(
        [b.non_tensor_batch["max_global_steps"] - b.non_tensor_batch["min_global_steps"] for b in batches]
    )
    assert spans.max() >= 1, "some episode spanned a weight update (a partial rollout)"


def test_fully_async_with_every_env_failing_stops_with_the_typed_error(tokenizer: Any) -> None:
    import gem_core
    from gem_core.testing import faulty_number_guess

    gem_core.register("test:AsyncFaulty-v0", faulty_number_guess, kwargs={"error": "TimeoutError"}, override=True)
    cfg = trainer_config(1)  # on_env_error=end: the episode ends as one sample that trains nothing
    agent_worker = worker(cfg, Server(BISECT, tokenizer), tokenizer)
    queue = QueueClient(cfg)
    trainer = Trainer(cfg, tokenizer, queue, required=1)

    async def run() -> Any:
        await rollouter_puts(cfg, agent_worker, queue, 0, 0, env_id="test:AsyncFaulty-v0", env_kwargs={"fail_at": 0})
        _, batch = await TRAINER._get_samples_from_queue(trainer)
        return batch

    batch = asyncio.run(run())
    assert int(batch.batch["response_mask"].sum()) == 0
    assert batch.non_tensor_batch["min_global_steps"].tolist() == [0]  # no reply in the batch told a version
    with pytest.raises(ValueError, match="at least one valid token"):  # verl's rollout correction stops first
        trainer_step(trainer, copy.deepcopy(batch), seed=0)
    with open_dict(cfg):
        cfg.algorithm.rollout_correction = None
    with pytest.raises(RLInputError, match="no trainable token"):  # else gem's check, before a 0/0 loss
        trainer_step(trainer, batch, seed=0)


def test_the_transition_layout_is_refused_by_the_legacy_worker(tokenizer: Any) -> None:
    cfg = trainer_config(1, layout="transition")
    agent_worker = worker(cfg, Server(BISECT, tokenizer), tokenizer)
    batch = prepare_single_generation_data(batch_dict([0]), cfg)
    with pytest.raises(ConfigError, match="legacy AgentLoopWorker"):
        asyncio.run(agent_worker.generate_sequences(batch))


class Manager:
    """``AgentLoopManager`` with verl's ``generate_sequences``; its workers' Ray ``.remote`` calls run in-process."""

    def __init__(self, agent_worker: AgentLoopWorker) -> None:
        class Remote:
            def remote(self, chunk: Any) -> Any:
                return agent_worker.generate_sequences(chunk)

        self.agent_loop_workers = [type("Handle", (), {"generate_sequences": Remote()})()]

    _performance_metrics = AgentLoopManager._performance_metrics

    async def generate_sequences(self, prompts: Any) -> Any:
        # verl's method under its auto_await decorator (which would run it on another thread's loop)
        return await AgentLoopManager.generate_sequences.__wrapped__(self, prompts)


@pytest.mark.parametrize("rows", [3, 1], ids=["odd-rows", "one-row"])
def test_one_step_off_steps_carry_turns_versions_and_behaviour_logprobs(tokenizer: Any, rows: int) -> None:
    cfg = trainer_config(1)
    server = Server(BISECT, tokenizer, global_steps=2, step_every=3)
    trainer = Trainer(cfg, tokenizer)
    trainer.async_rollout_manager = Manager(worker(cfg, server, tokenizer))
    trainer.global_steps = 1
    trainer._get_gen_batch = lambda batch: OneStepOffRayTrainer._get_gen_batch(trainer, batch)
    batches = [batch_dict(list(range(i * rows, (i + 1) * rows)), start=i * rows) for i in range(3)]

    async def run() -> list[Any]:
        out = []
        iterator = iter([(0, b) for b in batches])
        for step in range(3):
            _, _, _, batch, _ = await OneStepOffRayTrainer._async_gen_next_batch(trainer, iterator)
            out.append(trainer_step(trainer, batch, seed=step))
        assert await OneStepOffRayTrainer._async_gen_next_batch(trainer, iterator) is None  # zero: the data ran out
        return out

    for batch in asyncio.run(run()):
        assert len(batch) == rows
        check_batch(batch, server, cfg)


def test_settings_without_gem_samples_are_left_to_verl(tokenizer: Any) -> None:
    """A batch without gem's per-token fields goes to verl's compute_advantage unchanged."""
    from verl import DataProto
    from verl.experimental.separation import ray_trainer

    mask = torch.tensor([[1, 1, 0]], dtype=torch.float32)
    data = DataProto.from_single_dict(
        {
            "token_level_rewards": torch.tensor([[0.0, 1.0, 0.0]]),
            "response_mask": mask,
            "uid": np.array(["a"], dtype=object),
        }
    )
    out = ray_trainer.compute_advantage(data, adv_estimator="rebn", config=OmegaConf.create({"gamma": 1.0}))
    assert torch.equal(out.batch["advantages"], torch.zeros(1, 3))  # one turn in the batch: no spread


def test_token_level_rejection_cannot_split_a_turn_in_the_fully_async_trainer(tokenizer: Any) -> None:
    """Token_k1 rejection (verl's) zeroes tokens inside turns; rebn still sees whole turns (mask runs would refuse)."""
    cfg = trainer_config(3, rollout_rs="token_k1")
    server = Server(BISECT, tokenizer, global_steps=1, step_every=2)
    queue = QueueClient(cfg)
    trainer = Trainer(cfg, tokenizer, queue, required=1)

    async def run() -> Any:
        await rollouter_puts(cfg, worker(cfg, server, tokenizer), queue, 11, 0)
        _, batch = await TRAINER._get_samples_from_queue(trainer)
        generated = batch.batch["response_mask"].clone()
        return generated, trainer_step(trainer, batch, seed=5)

    generated, batch = asyncio.run(run())
    kept = batch.batch["response_mask"].numpy().astype(bool)
    turns = batch.batch["gem_turn_ids"].numpy()
    assert (kept <= generated.numpy().astype(bool)).all() and kept.sum() < generated.sum(), "tokens were rejected"
    for r in range(len(batch)):  # verl's rejection is gem_core's token mask over [0.5, 2.0]
        mine = correct(
            batch.batch["old_log_probs"][r].numpy(),
            batch.batch["rollout_log_probs"][r].numpy(),
            generated[r].numpy(),
            OffPolicyConfig(token_mask_low=0.5, token_mask_high=2.0),
        )
        assert mine.keep.tolist() == kept[r].tolist()
    advantages = batch.batch["advantages"].numpy()
    for r in range(len(batch)):
        for t in set(turns[r][kept[r]].tolist()):
            assert len(set(advantages[r][(turns[r] == t) & kept[r]].tolist())) == 1, "one advantage per turn"
    np.testing.assert_allclose(advantages, expected_rebn(batch, cfg.algorithm.gamma), atol=1e-6)


@settings(deadline=None, max_examples=8)
@given(fail_at=st.lists(st.sampled_from([None, 0, 1, 2]), min_size=1, max_size=3), n=st.sampled_from([1, 2]))
def test_any_mix_of_failing_and_whole_episodes_assembles(tokenizer: Any, fail_at: list[int | None], n: int) -> None:
    """Every sample of a fully-async batch gets integer versions and per-token fields, whichever envs failed."""
    import gem_core
    from gem_core.testing import faulty_number_guess

    gem_core.register("test:AsyncFaulty-v0", faulty_number_guess, kwargs={"error": "TimeoutError"}, override=True)
    cfg = trainer_config(n)
    server = Server(BISECT, tokenizer, global_steps=4, step_every=3)
    agent_worker = worker(cfg, server, tokenizer)
    queue = QueueClient(cfg)
    trainer = Trainer(cfg, tokenizer, queue, required=len(fail_at))

    async def run() -> Any:
        for seed, fail in enumerate(fail_at):
            row_kwargs: dict[str, Any] = {}
            if fail is not None:
                row_kwargs = {"env_id": "test:AsyncFaulty-v0", "env_kwargs": {"fail_at": fail}}
            await rollouter_puts(cfg, agent_worker, queue, seed, 0, **row_kwargs)
        return await TRAINER._get_samples_from_queue(trainer)

    _, batch = asyncio.run(run())
    assert len(batch) == n * len(fail_at)
    lows, highs = batch.non_tensor_batch["min_global_steps"], batch.non_tensor_batch["max_global_steps"]
    assert all(type(v) is int for v in [*lows, *highs])
    mask = batch.batch["response_mask"].numpy().astype(bool)
    assert ((batch.batch["gem_turn_ids"].numpy() >= 0) == mask).all()
    assert ((batch.batch["gem_policy_versions"].numpy() >= 0) == mask).all()
