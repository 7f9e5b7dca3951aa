"""``GRPOTrainer`` with gem rollouts and per-turn ReBN advantages.

TRL computes one advantage per completion from a group of completions of the same
prompt (GRPO). For multi-turn episodes with per-turn rewards, :class:`GemGRPOTrainer`
replaces it by ReBN (GEM, arXiv 2510.01051): per-turn discounted returns
``G_t = r_t + gamma * G_{t+1}``, normalised over every turn of the whole batch (all
processes), each turn's advantage placed on that turn's generated tokens. TRL's loss
accepts such ``(batch, tokens)`` advantages as they are. ``advantage_estimator="grpo"``
keeps TRL's group advantage of the (discounted) episode return.

A turn none of whose tokens is in TRL's loss mask (``mask_truncated_completions`` drops
a completion whose last reply was cut; the rollout masks out every turn of an episode
an env error ended) is left out of the ReBN mean and std and gets advantage 0, so what
the loss ignores does not shift the others. TRL's completions log
gets the advantages the loss uses.

With a vision-language model's processor as ``processing_class``, the episodes' images
(encoded by the rollout's engine) reach every forward of the batch: see :mod:`gem_trl.vision`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from trl import GRPOConfig, GRPOTrainer

from gem_core.episode import CutPolicy, EnvErrorPolicy
from gem_core.errors import ConfigError
from gem_core.registry import WrapperRef
from gem_core.rl.returns import check_gamma
from gem_core.rl.types import Episode
from gem_trl.advantages import completion_spans, rebn_token_advantages
from gem_trl.contract import check_trl_api
from gem_trl.rollout import GemRollout, episode_return_reward
from gem_trl.vision import batch_image_features, image_token_id

__all__ = ["ADVANTAGE_ESTIMATORS", "GemGRPOConfig", "GemGRPOTrainer"]

#: Estimators :class:`GemGRPOTrainer` accepts.
ADVANTAGE_ESTIMATORS = ("rebn", "grpo")


@dataclass
class GemGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus the settings of gem episodes and their advantages.

    The defaults that TRL would otherwise pick for single-turn text (``loss_type="dapo"``)
    stay TRL's; ``max_completion_length`` bounds a whole episode's completion (generated
    plus env tokens).
    """

    advantage_estimator: str = field(
        default="rebn",
        metadata={"help": "'rebn': per-turn returns normalised over the batch (GEM); 'grpo': TRL's group advantage."},
    )
    gamma: float = field(default=1.0, metadata={"help": "Per-turn discount of the returns, in [0, 1]."})
    max_turns: int | None = field(default=None, metadata={"help": "End episodes after this many turns."})
    max_turn_tokens: int = field(default=64, metadata={"help": "Most tokens the model generates in one turn."})
    on_cut: str = field(
        default="invalid",
        metadata={
            "help": "A reply cut at its token limit: 'invalid' (the env gets an invalid action, GEM's rule), "
            "'pass' (the cut text is sent) or 'truncate' (the episode ends there)."
        },
    )
    on_env_error: str = field(
        default="end",
        metadata={
            "help": "An env that raises in reset/step: 'end' (only its episode ends; it carries no loss weight and "
            "is counted in gem/env_errors) or 'raise' (the training step fails)."
        },
    )
    rebn_eps: float = field(default=1e-9, metadata={"help": "Added to the std in ReBN."})

    def __post_init__(self) -> None:
        if self.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            raise ConfigError(
                f"advantage_estimator must be one of {ADVANTAGE_ESTIMATORS}, got {self.advantage_estimator!r}"
            )
        if self.num_generations is not None and self.num_generations < 2:
            raise ConfigError(
                f"num_generations={self.num_generations}: TRL's GRPOTrainer needs at least 2 episodes per start "
                "state (it groups them for its reward statistics). For one episode per optimizer step set "
                "per_device_train_batch_size=1 and steps_per_generation=num_generations (ReBN still normalises over "
                "the whole generation batch)"
            )
        if self.advantage_estimator == "rebn":
            _refuse_sequence_level_options(self)
        super().__post_init__()
        try:
            self.gamma = check_gamma(self.gamma)
        except ValueError as exc:
            raise ConfigError(f"gamma: {exc}") from None
        if self.max_turns is not None and self.max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1 or None, got {self.max_turns}")
        if self.max_turn_tokens < 1:
            raise ConfigError(f"max_turn_tokens must be >= 1, got {self.max_turn_tokens}")
        if self.on_cut not in ("invalid", "pass", "truncate"):
            raise ConfigError(f"on_cut must be 'invalid', 'pass' or 'truncate', got {self.on_cut!r}")
        if self.on_env_error not in ("end", "raise"):
            raise ConfigError(f"on_env_error must be 'end' or 'raise', got {self.on_env_error!r}")


def _refuse_sequence_level_options(config: GRPOConfig) -> None:
    """Refuse the TRL options that read one advantage per sequence, or shape advantages ReBN computes itself.

    Both compare the sign of the advantage with a statistic of the whole completion; with
    a ``(batch, tokens)`` advantage TRL broadcasts the one over the other without an error,
    and a multi-turn episode would be weighted or dropped on the strength of its other turns.
    """
    fix = "or set advantage_estimator='grpo' (one advantage per episode, which they are built for)"
    if config.loss_type == "vespo":
        raise ConfigError(
            "loss_type='vespo' weights each completion by a sequence-level importance ratio chosen by the sign of "
            "its one advantage; with advantage_estimator='rebn' every turn has its own advantage. Use another "
            f"loss_type (dapo, dr_grpo, grpo, bnpo, cispo, sapo, luspo) {fix}"
        )
    if config.scale_rewards not in ("group", True):
        raise ConfigError(
            f"scale_rewards={config.scale_rewards!r} has no effect with advantage_estimator='rebn': ReBN computes "
            "the advantages itself, normalising each turn's return over the whole batch. Remove scale_rewards "
            f"{fix}"
        )
    if config.off_policy_mask_threshold is not None:
        raise ConfigError(
            f"off_policy_mask_threshold={config.off_policy_mask_threshold} drops a whole completion by the sign of "
            "its one advantage and its mean KL; with advantage_estimator='rebn' every turn has its own advantage. "
            f"Remove off_policy_mask_threshold {fix}"
        )


class GemGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` that trains on gem episodes, with ReBN advantages by default.

    Args:
        model: As for ``GRPOTrainer`` (a model object or a local path).
        args: A :class:`GemGRPOConfig`.
        train_dataset: Episode keys, e.g. ``make_prompt_dataset("game:GuessTheNumber-v0-easy", 256)``.
        reward_funcs: Defaults to the episode return (:func:`episode_return_reward`).
        rollout_func: Defaults to a :class:`GemRollout` built from ``args`` and the arguments below.
        wrappers: Wrappers added to every env by the default rollout.
        system_prompt: System message of the default rollout.
        env_kwargs: Env constructor overrides for the default rollout.
        **kwargs: Passed to ``GRPOTrainer`` (``processing_class``, ``callbacks``, ...).
    """

    def __init__(
        self,
        model: Any,
        args: GemGRPOConfig,
        train_dataset: Any,
        *,
        reward_funcs: Any = None,
        rollout_func: Any = None,
        wrappers: Sequence[WrapperRef] = (),
        system_prompt: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(args, GemGRPOConfig):
            raise ConfigError(f"args must be a GemGRPOConfig, got {type(args).__name__}")
        check_trl_api()  # the TRL internals used below are still there
        if rollout_func is None:
            rollout_func = GemRollout(
                wrappers=wrappers,
                gamma=args.gamma,
                max_turns=args.max_turns,
                max_turn_tokens=args.max_turn_tokens,
                on_cut=cast(CutPolicy, args.on_cut),
                on_env_error=cast(EnvErrorPolicy, args.on_env_error),
                system_prompt=system_prompt,
                env_kwargs=env_kwargs,
            )
        super().__init__(
            model=model,
            reward_funcs=[episode_return_reward] if reward_funcs is None else reward_funcs,
            args=args,
            train_dataset=train_dataset,
            rollout_func=rollout_func,
            **kwargs,
        )
        check_trl_api(self)
        if isinstance(rollout_func, GemRollout):
            rollout_func.setup(self)  # the template probe: fail now, not in the middle of train()

    # ------------------------------------------------------------------ images (gem_trl.vision)

    def _generate(self, prompts: list[Any]) -> Any:
        result = super()._generate(prompts)
        extra_fields = result[5]  # the rollout's per-episode fields; image features are not a reward input
        rows = extra_fields.pop("image_inputs", None) if isinstance(extra_fields, dict) else None
        self._gem_images = batch_image_features(rows, self.accelerator.device) if rows else None
        return result

    def _get_per_token_logps_and_entropies(self, model: Any, input_ids: Any, *args: Any, **kwargs: Any) -> Any:
        """TRL's forward with the episodes' images: from the rollout while a batch is scored, else from the batch."""
        pending = getattr(self, "_gem_images", None)
        if kwargs.get("pixel_values") is None and pending is not None:
            if len(pending["num_images"]) != input_ids.size(0):  # only the whole generation batch is scored here
                raise ConfigError(
                    f"gem_trl: {input_ids.size(0)} sequences scored with the images of {len(pending['num_images'])} "
                    "episodes; the TRL version changed how it scores a generation batch"
                )
            kwargs.update(pending)
        token_id = image_token_id(self.processing_class)
        if kwargs.get("pixel_values") is not None and kwargs.get("mm_token_type_ids") is None and token_id is not None:
            # the image tokens sit in the prompt and in the completion (later turns' images): read them off the ids
            kwargs["mm_token_type_ids"] = (input_ids == token_id).long()
        return super()._get_per_token_logps_and_entropies(model, input_ids, *args, **kwargs)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self._gem_images = None
        try:
            output: dict[str, Any] = super()._generate_and_score_completions(inputs)
            if self._gem_images is not None:  # TRL's loss reads them from the batch (split per sequence by TRL)
                output.update(self._gem_images)
        finally:
            self._gem_images = None
        if self.args.advantage_estimator != "rebn":
            return output
        started = time.perf_counter()
        # TRL merged the rollout's per-episode fields into ``inputs``.
        if not inputs or "episode" not in inputs[0]:
            raise ConfigError("ReBN needs the 'episode' field of gem_trl.GemRollout; use it as rollout_func")
        episodes: list[Episode] = [x["episode"] for x in inputs]
        # A turn none of whose tokens reach the loss (mask_truncated_completions, ...) stays out of the statistics.
        loss_mask = output["completion_mask"]
        if "tool_mask" in output:
            loss_mask = loss_mask * output["tool_mask"]
        in_loss = loss_mask.bool().cpu()
        keep = [[bool(in_loss[row, a:b].any()) for a, b in completion_spans(ep)] for row, ep in enumerate(episodes)]
        # Every rank takes part: the statistics are all-reduced over the whole batch.
        advantages, _ = rebn_token_advantages(
            episodes,
            self.args.gamma,
            output["completion_ids"].shape[1],
            keep=keep,
            distributed=True,
            eps=self.args.rebn_eps,
        )
        advantages = advantages.to(output["completion_ids"].device) * loss_mask
        output["advantages"] = advantages
        self._log_used_advantages(advantages, loss_mask, keep)
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["gem/time_advantages"].append(time.perf_counter() - started)
        return output

    def _log_used_advantages(self, advantages: torch.Tensor, loss_mask: torch.Tensor, keep: list[list[bool]]) -> None:
        """Replace the GRPO advantages TRL logged for this batch by the ReBN ones the loss uses.

        TRL's completions log (``log_completions``) holds one number per completion: here
        the mean advantage over the completion's loss tokens.
        """
        from accelerate.utils import gather_object

        weight = loss_mask.sum(dim=1).clamp(min=1)
        per_row = ((advantages * loss_mask).sum(dim=1) / weight).tolist()
        gathered = gather_object(per_row)
        logged = self._logs["advantages"]
        for _ in range(min(len(gathered), len(logged))):
            logged.pop()
        logged.extend(gathered)
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["gem/turns_out_of_loss"].append(float(sum(not k for row in keep for k in row)))
