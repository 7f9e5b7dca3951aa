"""OpenRLHF's whole training step on the CPU, past the rollout: experience maker, replay buffer, actor loss, update.

What runs is OpenRLHF 0.11.2's own code, with the args its own CLI parser builds:
``BasePPOTrainer.train_step`` (``RemoteExperienceMaker.make_experience_batch``: sample
batching, the actor's log-probs through ``RayActorGroup.async_run_method_batch`` and
``PolicyModelActor.forward``, ``compute_advantages_and_returns`` (gem's ReBN when
patched), its rollout stats), ``PolicyModelActor.append`` into the actor's
``NaiveReplayBuffer`` (split per sample, padding removed), and
``PolicyModelActor.fit`` -> ``ActorPPOTrainer.ppo_train``: the ``DataLoader`` over the
buffer with its collate, ``iter_grad_accum_global_norm``, ``training_step`` (OpenRLHF's
``Actor`` forward on a tiny Qwen2 model, ``PolicyLoss``, the KL loss,
``aggregate_loss``), its metrics reduction, then the buffer cleared.

Stand-ins, for what needs a GPU: DeepSpeed's engine (:class:`CpuStrategy`: the loss
scaled by ``1 / accumulated_gradient`` on backward and the optimizer stepped at each
accumulation boundary, as DeepSpeed's engine does for OpenRLHF's ``DeepspeedStrategy``);
the Ray actor hop to the model actor (:class:`InProcessHandle`: the actor's real
``execute_batch``/``append``/``fit`` run in this process, their arguments and results
pass through the real Ray object store); ``torch.cuda.current_device``/``synchronize``
(CPU). One data-parallel rank.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from gem_openrlhf.launcher import prepare
from harness import SamplesGenerator  # noqa: F401  # stand-in GPU modules first
from openrlhf.models import Actor
from openrlhf.trainer.ppo_trainer import BasePPOTrainer
from openrlhf.trainer.ray import ppo_actor
from openrlhf.trainer.ray.launcher import RayActorGroup

from gem_core.testing_models import build_tiny_model

__all__ = [
    "CpuStrategy",
    "InProcessHandle",
    "PPOStep",
    "TrainedSample",
    "cpu_cuda",
    "one_rank_process_group",
    "openrlhf_args",
    "tiny_policy",
]


class _Parsed(Exception):
    """Raised at the first line of OpenRLHF's ``train(args)``, carrying the args its CLI built."""


def openrlhf_args(argv: Sequence[str]) -> Any:
    """``gem-openrlhf-train argv``'s checks, then OpenRLHF's own parser and checks: the ``args`` its ``train()`` gets.

    Raises:
        gem_core.errors.ConfigError: What the launcher refuses (before OpenRLHF's parser runs).
    """
    import ray

    plan = prepare(list(argv), environ={})
    saved_argv, saved_is_initialized = list(sys.argv), ray.is_initialized

    def is_initialized() -> bool:
        raise _Parsed(sys._getframe(1).f_locals["args"])

    sys.argv = ["openrlhf.cli.train_ppo_ray", *plan.argv]
    ray.is_initialized = is_initialized
    try:
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=True)
    except _Parsed as parsed:
        return parsed.args[0]
    finally:
        sys.argv, ray.is_initialized = saved_argv, saved_is_initialized
    raise AssertionError("OpenRLHF's train() was never reached")


@contextmanager
def cpu_cuda() -> Iterator[None]:
    """``torch.cuda.current_device()`` is ``"cpu"`` and ``synchronize`` a no-op (OpenRLHF moves tensors to it)."""
    saved = torch.cuda.current_device, torch.cuda.synchronize
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
    torch.cuda.synchronize = lambda *a, **k: None  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.cuda.current_device, torch.cuda.synchronize = saved  # type: ignore[assignment]


def one_rank_process_group() -> None:
    """A one-rank gloo process group, as DeepSpeed's ``setup_distributed`` would start (idempotent)."""
    import socket

    import torch.distributed as dist

    if dist.is_initialized():
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)


class CpuStrategy:
    """OpenRLHF's ``DeepspeedStrategy`` as the step uses it, on one CPU rank (DeepSpeed's engine needs CUDA).

    ``backward`` scales the loss by ``1 / accumulated_gradient`` and ``optimizer_step``
    steps only at an accumulation boundary, as DeepSpeed's engine does; gradients of a
    trailing partial window stay for the next boundary, as in DeepSpeed.

    Attributes:
        optimizer_steps: Optimizer steps taken.
        pending: Backward passes since the last optimizer step (gradients a later step would inherit).
    """

    def __init__(self, args: Any) -> None:
        self.args = args
        self.world_size = 1
        self.ring_attn_group = None
        self.ds_device_mesh = None
        # DeepspeedStrategy's formula, one rank, no ring attention, no tensor parallelism
        self.accumulated_gradient = max(args.train.batch_size // args.train.micro_batch_size, 1)
        self.optimizer_steps = 0
        self.pending = 0

    def backward(self, loss: torch.Tensor, model: Any, optimizer: Any, **kwargs: Any) -> None:
        (loss / self.accumulated_gradient).backward()
        self.pending += 1

    def optimizer_step(self, optimizer: Any, model: Any, scheduler: Any, name: str = "model", **kwargs: Any) -> None:
        if self.pending == self.accumulated_gradient:
            self.pending = 0
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()
            self.optimizer_steps += 1

    def get_grad_norm(self, model: Any) -> float:
        return 0.0

    def all_reduce(self, data: Any, op: str = "mean") -> Any:
        return data  # one rank

    def is_rank_0(self) -> bool:
        return True

    def print(self, *args: Any) -> None:
        pass


class InProcessHandle:
    """A Ray actor handle whose ``method.remote(...)`` runs the actor's real method here, through Ray's object store."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def __getattr__(self, name: str) -> Any:
        import ray

        method = getattr(self.actor, name)

        def remote(*args: Any, **kwargs: Any) -> Any:
            args = tuple(ray.get(a) if isinstance(a, ray.ObjectRef) else a for a in args)
            return ray.put(method(*args, **kwargs))

        return type("RemoteMethod", (), {"remote": staticmethod(remote)})()


def tiny_policy(tokenizer: Any, seed: int = 0) -> Any:
    """A tiny Qwen2 causal LM over ``tokenizer``'s vocabulary, float32, SDPA attention (torch left seeded)."""
    return build_tiny_model(
        tokenizer,
        seed=seed,
        restore_rng=False,
        attention="sdpa",
        dtype=torch.float32,
        max_position_embeddings=2048,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )


@dataclass
class TrainedSample:
    """One sample as one ``training_step`` consumed it (OpenRLHF's ``action_mask`` coordinates)."""

    label: str
    tokens: tuple[int, ...]
    advantages: tuple[float, ...]
    batch_num_tokens: float


@dataclass
class PPOStep:
    """OpenRLHF's driver-side trainer and its (one-rank) policy actor, built as ``train_ppo_ray`` builds them.

    Attributes:
        trained: Per step, every sample a ``training_step`` fed to the loss.
        statuses: Per step, what ``train_step`` returned.
    """

    args: Any
    tokenizer: Any
    model: Any
    trained: list[list[TrainedSample]] = field(default_factory=list)
    statuses: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        one_rank_process_group()
        self.strategy = CpuStrategy(self.args)
        policy_cls = ppo_actor.PolicyModelActor.__ray_metadata__.modified_class
        policy = policy_cls.__new__(policy_cls)  # its __init__ loads a DeepSpeed engine
        policy.strategy = self.strategy
        policy.actor = Actor(self.model)
        policy.actor.packing_samples = self.args.ds.packing_samples
        # no weight decay: an update from zero gradients then leaves the weights as they are
        optimizer = torch.optim.AdamW(
            policy.actor.parameters(),
            lr=self.args.actor.adam.lr,
            betas=tuple(self.args.actor.adam.betas),
            weight_decay=0,
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
        with cpu_cuda():
            torch.cuda.current_device = lambda: 0  # type: ignore[assignment]  # the buffer names a device, unused here
            policy.trainer = ppo_actor.ActorPPOTrainer(
                self.strategy,
                policy.actor,
                ema_model=None,
                actor_optim=optimizer,
                actor_scheduler=scheduler,
                micro_train_batch_size=self.args.train.micro_batch_size,
                tokenizer=self.tokenizer,
                eps_clip=self.args.actor.eps_clip,
                ema_beta=self.args.train.ema_beta,
                vllm_engines=None,
                dataloader_pin_memory=False,  # pinning needs an accelerator
            )
        self.policy = policy
        group = RayActorGroup.__new__(RayActorGroup)  # its __init__ places GPU actors
        group._actor_handlers = [InProcessHandle(policy)]
        group.duplicate_actors = 1
        self.trainer = BasePPOTrainer(self.strategy, group, None, None, None, None, self.tokenizer)
        record = policy.trainer.training_step

        def training_step(experience: Any, kl_ctl: float, step: int, loss_batch_info: Any = None) -> Any:
            mask = experience.action_mask.bool()
            for row, label in enumerate(experience.labels):
                length = int(experience.attention_mask[row].sum())
                self.trained[-1].append(
                    TrainedSample(
                        label=label,
                        tokens=tuple(experience.sequences[row, :length].tolist()),
                        advantages=tuple(experience.advantages[row][mask[row]].tolist()),
                        batch_num_tokens=float(loss_batch_info["batch_num_tokens"]),
                    )
                )
            return record(experience, kl_ctl, step, loss_batch_info)

        policy.trainer.training_step = training_step

    def step(self, rollout_samples: list[Any]) -> dict[str, Any]:
        """One ``train_step`` over ``rollout_samples`` (OpenRLHF's ``Experience`` per sample); its status."""
        self.trained.append([])
        with cpu_cuda():
            status, _ = self.trainer.train_step(rollout_samples, len(self.statuses))
        self.statuses.append(status)
        return status
