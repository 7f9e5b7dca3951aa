"""``GemOatLearner``: oat's multi-turn learner with the core's ReBN advantages.

oat's ``PPOMultiTurnLearner.process_feedback_data`` computes per-turn REINFORCE returns
(float32) and stores them as each transition's ``info["advantages"]``; with
``--whiten_adv`` its ``learning_step`` then whitens them in float32, which gives NaN (or
+-14.9) when all returns are equal (see :mod:`gem_oat.rebn`). This learner keeps
``whiten_adv`` off and, after oat's own bookkeeping (subsampling to
``rollout_batch_size_per_device``, buffers, query counter), overwrites ``advantages`` and
``returns`` with float64 values: ``G_t`` with ``--gamma`` per turn, then ReBN over every
transition this step collected on every learner rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oat.algorithms.ppo_multiturn import PPOMultiTurnLearner
from oat.types import Transition

from gem_oat.args import check_args
from gem_oat.rebn import episode_rebn

__all__ = ["GemOatLearner"]


class GemOatLearner(PPOMultiTurnLearner):
    """``PPOMultiTurnLearner`` whose advantages are the core's ReBN."""

    def _init(self, args: Any, actors: list[Any]) -> None:
        check_args(args)
        super()._init(args, actors)

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

    def process_feedback_data(self, data_list: Sequence[Sequence[Transition]]) -> None:
        """Compute returns and ReBN advantages, then let oat fill its buffers."""
        import torch

        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
        returns, advantages = episode_rebn(
            [[t.rewards for t in episode] for episode in data_list],
            self.args.gamma,
            distributed=distributed,
            device=device,
        )
        # oat's pass: its float32 returns, then subsampling and the buffers (which hold these same objects).
        super().process_feedback_data(data_list)
        for episode, episode_returns, episode_advantages in zip(data_list, returns, advantages, strict=True):
            for transition, g, a in zip(episode, episode_returns, episode_advantages, strict=True):
                transition.info["returns"] = float(g)
                transition.info["advantages"] = float(a)


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
