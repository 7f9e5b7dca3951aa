"""``GemOatLearner``: oat's multi-turn learner, training each round on exactly that round's transitions.

oat 0.2.4's ``PPOMultiTurnLearner`` puts each collect step's transitions into
``pi_buffer`` (a ``deque(maxlen=pi_buffer_maxlen_per_device)``, oat's default 16, never
cleared by default) and trains every round on the whole buffer: the last 16 transitions
only, and older policies' transitions again when a round brings fewer. Its
``learning_step`` groups ``num_samples`` (default 2) transitions in a metric, which fails
on an odd count after the gradient step. This learner (with the launcher's options, see
:func:`gem_oat.args.check_round_options`):

* keeps a list of the transitions each round brings and checks, when the round trains,
  that the buffer holds exactly those (a typed error naming the option otherwise); the
  buffer is cleared after every round;
* writes ``returns`` (``G_t`` with ``--gamma`` per turn, float64, from whole episodes) when a
  collect step arrives and ``advantages`` (ReBN, float64, statistics over exactly the
  transitions the round trains on, on every learner rank) when the round starts training;
  oat's ``--whiten_adv`` (float32, NaN for equal returns, see :mod:`gem_oat.rebn`) stays off;
* survives rounds with no transitions (every env failed under ``--on_env_error end``): a
  round with none on any rank skips training; a rank with fewer than another is padded with
  zero-weight transitions (``loss_mask=False``), so every rank runs the same number of
  DeepSpeed micro-steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from oat.algorithms.ppo_multiturn import MultiTurnFeedbackCollector, PPOMultiTurnLearner
from oat.types import Transition

from gem_core.errors import ConfigError
from gem_oat.args import check_args, check_round_options
from gem_oat.rebn import episode_returns, rebn_over_ranks

__all__ = ["GemOatFeedbackCollector", "GemOatLearner"]


class GemOatFeedbackCollector(MultiTurnFeedbackCollector):
    """oat's multi-turn collector, whose metrics also work for a step that brought no transition."""

    def get_metrics(self, actor_time: float, feedback_data: Sequence[Sequence[Transition]]) -> dict[str, Any]:
        """Oat's metrics; with no transition only the time and the count (oat's averages need one)."""
        if not any(feedback_data):
            return {"actor/total_time": actor_time, "actor/num_transitions": 0}
        return dict(super().get_metrics(actor_time, feedback_data))


class GemOatLearner(PPOMultiTurnLearner):
    """``PPOMultiTurnLearner`` that trains each round on that round's transitions, with float64 ReBN."""

    def _init(self, args: Any, actors: list[Any]) -> None:
        from oat.utils.ipc import PlasmaShmClient

        self.resolve_args(args)
        super()._init(args, actors)
        check_round_options(args, self.strategy.world_size)  # the exact rank count, now known
        self.collector = GemOatFeedbackCollector(args, actors, PlasmaShmClient(self.ipc_server))

    @staticmethod
    def resolve_args(args: Any) -> Any:
        """Gem's checks, before oat builds its buffer from the args.

        ``--pi_buffer_maxlen_per_device 0`` (learner started without the launcher, which sets it)
        becomes ``rollout_batch_size``, more than any round brings to one rank.
        """
        check_args(args)
        if args.pi_buffer_maxlen_per_device == 0:
            args.pi_buffer_maxlen_per_device = args.rollout_batch_size
        return args

    def prepare_data(self, strategy: Any, tokenizer: Any) -> None:
        """Placeholder prompts: oat's loop draws a prompt batch per collect step, the actor ignores them.

        ``--max_train`` placeholders make ``max_train // rollout_batch_size`` collect steps.
        """
        from torch.utils.data import DataLoader

        self.prompts_dataset = _Placeholders(self.args.max_train)
        self.eval_prompts_dataset = _Placeholders(0)
        self.prompts_dataloader = strategy.setup_dataloader(
            self.prompts_dataset, strategy.args.rollout_batch_size_per_device, pin_memory=True, shuffle=True
        )
        self.eval_prompts_dataloader = DataLoader(self.eval_prompts_dataset, batch_size=1)

    def evaluate(self, dataloader: Any, steps: int) -> dict[str, Any]:
        """No prompt-set evaluation: the env metrics come from the actor (``actor/mean_episode_return`` etc.)."""
        del dataloader, steps
        return {}

    @property
    def round_transitions(self) -> list[Transition]:
        """The transitions collected since the last round trained, in arrival order (what the round trains on)."""
        if "_round" not in self.__dict__:
            self._round: list[Transition] = []
        return self._round

    def process_feedback_data(self, data_list: Sequence[Sequence[Transition]]) -> None:
        """Oat's pass (subsampling, buffer, query count), then float64 per-turn returns on every transition.

        ``info["advantages"]`` is NaN until :meth:`prepare_round` writes ReBN over the whole round.
        """
        returns = episode_returns([[t.rewards for t in episode] for episode in data_list], self.args.gamma)
        queries_before = self.query_step
        super().process_feedback_data(data_list)
        for episode, episode_returns_ in zip(data_list, returns, strict=True):
            for transition, g in zip(episode, episode_returns_, strict=True):
                transition.info["returns"] = float(g)
                transition.info["advantages"] = float("nan")
        kept = self.query_step - queries_before
        if kept > len(self.pi_buffer):
            raise ConfigError(
                f"pi_buffer holds {len(self.pi_buffer)} transitions but this step kept {kept}: "
                "--pi_buffer_maxlen_per_device is too small; leave it at 0 (automatic)"
            )
        self.round_transitions.extend(list(self.pi_buffer)[len(self.pi_buffer) - kept :])

    def prepare_round(self) -> list[Transition]:
        """Check the buffer holds exactly this round's transitions and write their ReBN advantages.

        Collective: every learner rank calls it (the statistics are all-reduced), also one
        with no transitions.

        Raises:
            ConfigError: The buffer lost transitions of the round or holds older ones, naming the option.
        """
        buffer, expected = list(self.pi_buffer), self.round_transitions
        if len(buffer) < len(expected):
            raise ConfigError(
                f"pi_buffer holds {len(buffer)} of the round's {len(expected)} transitions: "
                "--pi_buffer_maxlen_per_device is too small; leave it at 0 (automatic)"
            )
        if len(buffer) > len(expected) or any(a is not b for a, b in zip(buffer, expected, strict=True)):
            raise ConfigError(
                f"pi_buffer holds {len(buffer)} transitions, {len(expected)} of them from this round: "
                "the buffer was not cleared after the last round; use --buffer_clear_every 1"
            )
        advantages = rebn_over_ranks(
            [t.info["returns"] for t in buffer], distributed=_distributed(), device=_reduce_device()
        )
        for transition, advantage in zip(buffer, advantages, strict=True):
            transition.info["advantages"] = float(advantage)
        return buffer

    def learn(self, learning_round: int) -> dict[str, Any]:
        """Train on this round's transitions (each once per PPO epoch), then empty the buffer.

        Every rank trains on as many transitions as the rank with the most: the others are
        padded with zero-weight ones (``loss_mask=False``, advantage 0), so DeepSpeed's
        collectives line up. A round with no transition on any rank trains nothing.
        """
        try:
            batch = self.prepare_round()
            most = _max_over_ranks(len(batch))
            info: dict[str, Any] = {"train/learning_round": learning_round}
            if most > 0:
                self.pi_buffer.extend(self._padding(most - len(batch)))
                info = dict(super().learn(learning_round))
        finally:
            self.pi_buffer.clear()
            self.round_transitions.clear()
        info["train/gem_transitions"] = float(len(batch))
        info["train/gem_padding_transitions"] = float(most - len(batch))
        return info

    def _padding(self, count: int) -> list[Transition]:
        """``count`` one-token transitions with no loss weight and advantage 0."""
        token = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
        return [
            Transition(
                obs="",
                action="",
                rewards=0.0,
                done=True,
                prompt="",
                prompt_ids=[token],
                response="",
                response_ids=[token],
                response_logprobs=[0.0],
                response_is_truncated=False,
                action_is_formatted=False,
                loss_mask=False,
                info={"advantages": 0.0, "returns": 0.0, "values": 0.0},
            )
            for _ in range(count)
        ]


def _distributed() -> bool:
    import torch

    return bool(torch.distributed.is_available() and torch.distributed.is_initialized())


def _reduce_device() -> Any:
    """Where all-reduce tensors live: the rank's GPU (NCCL) or the CPU (gloo)."""
    import torch

    if _distributed() and torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _max_over_ranks(value: int) -> int:
    if not _distributed():
        return value
    import torch

    tensor = torch.tensor([value], dtype=torch.int64, device=_reduce_device())
    torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
    return int(np.asarray(tensor.cpu())[0])


class _Placeholders:
    """``n`` placeholder ``(prompt, formatted prompt, reference)`` triples: gem envs make the prompts."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[str, str, str]:
        if not 0 <= index < self.n:
            raise IndexError(index)
        return ("", "", "")
