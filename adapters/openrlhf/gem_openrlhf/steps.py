"""Which samples OpenRLHF 0.11.2's PPO step trains on, and the guards that keep it to all of them, each once.

OpenRLHF's step (``BasePPOTrainer.train_step``) batches the rollout's samples into
experiences of ``--rollout.micro_batch_size``, deals them out to the actor's
data-parallel ranks in contiguous chunks (``RayActorGroup.async_run_method_batch``),
and each rank trains on its replay buffer with a ``DataLoader`` of
``--train.micro_batch_size`` and ``drop_last=True``, stepping the optimizer every
``accumulated_gradient`` micro-batches (DeepSpeed). So, silently:

* samples past the last whole micro-batch of a rank are never trained on (ReBN's
  statistics still included them);
* a trailing partial accumulation window leaves its gradients in DeepSpeed for the
  next step (trained with the next step's samples, under the next policy);
* ranks given different numbers of micro-batches run different numbers of collective
  backward passes (a hang under ZeRO).

A step trains on exactly its samples, each once, when every rank gets a whole number
of optimizer steps: ``--train.batch_size / dp`` samples each (:func:`step_problem`).
``gem-openrlhf-train`` refuses flags whose full step breaks that, or whose prompt file
ends in a short step; :func:`guard_make_experience_batch` checks every step in the
trainer (a short step from a hub dataset or a filter) and stops it with a
:class:`~gem_core.errors.TrajectoryError` before anything is trained.

Samples without an action token (episodes an env error ended) open two more holes:

* an optimizer window of only such samples has OpenRLHF's loss normalisers at 0, and
  ``aggregate_loss`` divides 0 by 0: NaN gradients, NaN weights.
  :func:`nonzero_loss_norm` makes a zero normaliser 1 (the numerator is 0 there, so
  the loss is 0 and the update empty);
* a micro-batch of only such samples (on every rank) stops ``ppo_train`` with a
  ``ZeroDivisionError`` when it averages its token-weighted metrics.
  :func:`nonempty_metric_weight` reports such a micro-batch as one action token (its
  losses are 0), so the logs stay finite.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gem_core.errors import TrajectoryError

__all__ = [
    "StepShape",
    "guard_make_experience_batch",
    "nonempty_metric_weight",
    "nonzero_loss_norm",
    "rank_sample_counts",
    "step_problem",
]


@dataclass(frozen=True)
class StepShape:
    """The OpenRLHF settings that decide how a step's samples reach the loss.

    Attributes:
        rollout_micro_batch_size: ``--rollout.micro_batch_size`` (samples per experience).
        train_batch_size: ``--train.batch_size`` (samples per optimizer step, all ranks).
        train_micro_batch_size: ``--train.micro_batch_size`` (samples per forward, one rank).
        dp: Data-parallel actor ranks: ``actor.num_nodes * actor.num_gpus_per_node //
            ds.ring_attn_size // ds.tensor_parallel_size``.
    """

    rollout_micro_batch_size: int
    train_batch_size: int
    train_micro_batch_size: int
    dp: int

    @classmethod
    def from_args(cls, args: Any) -> StepShape:
        """From OpenRLHF's hierarchized CLI args."""
        dp = (
            args.actor.num_nodes
            * args.actor.num_gpus_per_node
            // max(args.ds.ring_attn_size, 1)
            // max(args.ds.tensor_parallel_size, 1)
        )
        return cls(args.rollout.micro_batch_size, args.train.batch_size, args.train.micro_batch_size, max(dp, 1))

    @property
    def per_rank_step(self) -> int:
        """Samples one rank trains on per optimizer step (``train_batch_size / dp``)."""
        return self.train_batch_size // self.dp


def rank_sample_counts(num_samples: int, shape: StepShape) -> list[int]:
    """How many of a step's ``num_samples`` each data-parallel rank's replay buffer gets (OpenRLHF's split)."""
    size = max(shape.rollout_micro_batch_size, 1)
    experiences = [min(size, num_samples - start) for start in range(0, num_samples, size)]
    chunk = -(-len(experiences) // shape.dp) if experiences else 0
    return [sum(experiences[rank * chunk : (rank + 1) * chunk]) for rank in range(shape.dp)]


def step_problem(num_samples: int, shape: StepShape) -> str | None:
    """Why a step of ``num_samples`` would not train on each of its samples exactly once; ``None`` when it does."""
    if shape.train_batch_size % (shape.train_micro_batch_size * shape.dp):
        return (
            f"--train.batch_size {shape.train_batch_size} is not a multiple of --train.micro_batch_size "
            f"{shape.train_micro_batch_size} x {shape.dp} data-parallel ranks"
        )
    counts = rank_sample_counts(num_samples, shape)
    if any(count == 0 or count % shape.per_rank_step for count in counts):
        return (
            f"a step of {num_samples} samples reaches the {shape.dp} actor rank(s) as {counts} samples "
            f"(--rollout.micro_batch_size {shape.rollout_micro_batch_size} per experience), which is not a whole "
            f"number of optimizer steps of {shape.per_rank_step} per rank (--train.batch_size "
            f"{shape.train_batch_size}): OpenRLHF would train on part of it only (drop_last) or carry gradients "
            "into the next step"
        )
    return None


def guard_make_experience_batch(original: Callable[..., Any]) -> Callable[..., Any]:
    """``RemoteExperienceMaker.make_experience_batch`` that first refuses a step OpenRLHF would not train whole."""

    @functools.wraps(original)
    def make_experience_batch(self: Any, rollout_samples: list[Any]) -> Any:
        problem = step_problem(len(rollout_samples), StepShape.from_args(self.strategy.args))
        if problem is not None:
            raise TrajectoryError(
                f"{problem}. Make every step a whole number of optimizer steps: --rollout.batch_size x "
                "--rollout.n_samples_per_prompt a multiple of --train.batch_size, a prompt count (after "
                "--data.max_samples) that is a multiple of --rollout.batch_size, no filter that shortens steps"
            )
        return original(self, rollout_samples)

    make_experience_batch.gem_guard = True  # type: ignore[attr-defined]
    return make_experience_batch


def nonzero_loss_norm(original: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """OpenRLHF's ``_optimizer_step_loss_norm`` with a zero token or sample count made 1 (its numerator is 0 then)."""

    @functools.wraps(original)
    def loss_norm(*args: Any, **kwargs: Any) -> dict[str, Any]:
        info = original(*args, **kwargs)
        for key in ("batch_num_tokens", "global_batch_size"):
            value = info[key]
            if hasattr(value, "masked_fill"):
                info[key] = value.masked_fill(value == 0, 1)
            elif value == 0:
                info[key] = 1
        return info

    loss_norm.gem_guard = True  # type: ignore[attr-defined]
    return loss_norm


def nonempty_metric_weight(original: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """``ActorPPOTrainer.training_step`` that reports a micro-batch without action tokens as weighing one token."""

    @functools.wraps(original)
    def training_step(*args: Any, **kwargs: Any) -> dict[str, Any]:
        status = original(*args, **kwargs)
        if not status["num_action_tokens"]:
            status["num_action_tokens"] = 1.0  # its token metrics are 0; ppo_train divides by this count
        return status

    training_step.gem_guard = True  # type: ignore[attr-defined]
    return training_step
