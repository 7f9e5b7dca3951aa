"""``gem-trl``: the YAML a TRL user writes for ``trl grpo``, plus env keys, trains on gem envs.

::

    gem-trl --config grpo.yaml [--any_field value ...]
    accelerate launch -m gem_trl.cli grpo.yaml          # multi-process / multi-GPU

The YAML is parsed by TRL's own parser (``trl.TrlParser``) with the dataclasses of
``trl grpo`` (``GRPOScriptArguments``, ``GRPOConfig``, ``ModelConfig``): every
``GRPOConfig`` field, every ``ModelConfig`` field and TRL's ``env:`` block of
environment variables work as they do there; command-line flags override the file.
``GRPOConfig`` is :class:`~gem_trl.trainer.GemGRPOConfig` here, which adds
``advantage_estimator``, ``gamma``, ``max_turns``, ``max_turn_tokens``, ``on_cut``,
``on_env_error`` and ``rebn_eps``. :class:`GemEnvArguments` adds where the episodes come from
(``env_ids``, ``seeds``, ``wrappers``, ...), replacing the dataset:
``dataset_name`` and the dataset mixture keys are refused with a :class:`ConfigError`.

The model is loaded by ``GRPOTrainer`` from ``model_name_or_path`` (a local directory or,
online, a hub id) with ``ModelConfig``'s settings, as ``trl grpo`` does; after training
the model is saved to ``output_dir``, pushed to the Hub when ``push_to_hub`` is set, and
``trainer.end()`` finishes the trackers. With ``eval_strategy`` other than ``"no"`` an eval
dataset of ``eval_seeds`` start states per env id (after the training seeds) is built.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gem_core.errors import ConfigError

__all__ = ["GemEnvArguments", "build_trainer", "main", "make_parser", "parse_args"]


@dataclass
class GemEnvArguments:
    """Where ``gem-trl``'s episodes come from (the keys ``trl grpo`` reads a dataset from are refused)."""

    env_ids: list[str] = field(
        default_factory=list,
        metadata={"help": "Registered gem env ids to train on (`gem list`); the dataset cycles through them."},
    )
    seeds: int = field(default=1024, metadata={"help": "Reset seeds (start states) per env id."})
    start_seed: int = field(default=0, metadata={"help": "First reset seed."})
    eval_seeds: int = field(
        default=16,
        metadata={"help": "Reset seeds per env id of the eval dataset (built when eval_strategy is not 'no')."},
    )
    eval_start_seed: int | None = field(
        default=None,
        metadata={"help": "First reset seed of the eval dataset; default: just after the training seeds."},
    )
    wrappers: list[str] = field(
        default_factory=list, metadata={"help": "Registered wrapper names added to every env, in order."}
    )
    wrapper_kwargs: dict | str | None = field(
        default=None,
        metadata={
            "help": "Keyword arguments per wrapper name, e.g. {tools: {tools: [echo]}} (JSON on the command line)."
        },
    )
    env_kwargs: dict | str | None = field(
        default=None,
        metadata={"help": "Constructor overrides for every env, e.g. {max_turns: 8} (JSON on the command line)."},
    )
    system_prompt: str | None = field(default=None, metadata={"help": "System message before each first observation."})


def _mapping(value: dict | str | None, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{name} must be a mapping (JSON on the command line): {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a mapping, got {type(value).__name__}")
    return value


def make_parser() -> Any:
    """TRL's ``TrlParser`` over ``trl grpo``'s dataclasses, with gem's config and env keys."""
    from trl import ModelConfig, TrlParser
    from trl.scripts.grpo import GRPOScriptArguments

    from gem_trl.trainer import GemGRPOConfig

    return TrlParser((GemEnvArguments, GRPOScriptArguments, GemGRPOConfig, ModelConfig), prog="gem-trl")


def parse_args(argv: Sequence[str] | None = None) -> tuple[Any, ...]:
    """Parse ``argv`` (a config path first, or ``--config path``, then flags) into the four dataclasses.

    Raises:
        ConfigError: Unknown keys, a dataset instead of env ids, or no env ids.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args and not args[0].startswith("-"):
        args = ["--config", *args]
    try:
        env_args, script_args, training_args, model_args = make_parser().parse_args_and_config(args)
    except ValueError as exc:  # TrlParser's "Unknown arguments from config file"
        raise ConfigError(f"gem-trl: {exc}") from None
    if script_args.dataset_name:
        raise ConfigError(
            f"gem-trl trains on env episodes, not a dataset: replace dataset_name={script_args.dataset_name!r} "
            "by env_ids (and seeds)"
        )
    if script_args.reward_model_name_or_path:
        raise ConfigError("gem-trl takes rewards from the envs; remove reward_model_name_or_path")
    if not env_args.env_ids:
        raise ConfigError("gem-trl needs env_ids: the registered env ids to train on (see `gem list`)")
    if not model_args.model_name_or_path:
        raise ConfigError("gem-trl needs model_name_or_path (a local model directory or a hub id)")
    return env_args, script_args, training_args, model_args


def _reward_funcs(names: Sequence[str] | None) -> list[Any] | None:
    """Reward functions from dotted import paths; ``None`` keeps the episode return."""
    if not names:
        return None
    funcs = []
    for name in names:
        module, _, attribute = name.rpartition(".")
        if not module:
            raise ConfigError(
                f"reward function {name!r}: gem-trl rewards come from the envs; give extra reward functions as "
                "dotted import paths (my_pkg.rewards.fn), or leave reward_funcs out"
            )
        funcs.append(getattr(importlib.import_module(module), attribute))
    return funcs


def _eval_dataset(env_args: Any, training_args: Any) -> Any:
    """The eval episodes when ``eval_strategy`` asks for evaluation: ``eval_seeds`` start states per env id.

    They start after the training seeds unless ``eval_start_seed`` says otherwise, so evaluation
    plays start states the policy did not train on. ``None`` when ``eval_strategy`` is ``"no"``.
    """
    from gem_trl.rollout import make_prompt_dataset

    strategy = str(getattr(training_args.eval_strategy, "value", training_args.eval_strategy))
    if strategy == "no":
        return None
    if env_args.eval_seeds < 1:
        raise ConfigError(
            f"eval_strategy={strategy!r} needs eval episodes: set eval_seeds >= 1 "
            "(start states per env id) or eval_strategy: 'no'"
        )
    start = env_args.start_seed + env_args.seeds if env_args.eval_start_seed is None else env_args.eval_start_seed
    return make_prompt_dataset(env_args.env_ids, env_args.eval_seeds, start_seed=start)


def build_trainer(env_args: Any, script_args: Any, training_args: Any, model_args: Any) -> Any:
    """The :class:`~gem_trl.trainer.GemGRPOTrainer` for parsed arguments (the model loaded as ``trl grpo`` does)."""
    from trl import get_peft_config, get_quantization_config

    from gem_trl.rollout import make_prompt_dataset
    from gem_trl.trainer import GemGRPOTrainer

    model_init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    model_init_kwargs.update(training_args.model_init_kwargs or {})
    training_args.model_init_kwargs = model_init_kwargs
    wrapper_kwargs = _mapping(env_args.wrapper_kwargs, "wrapper_kwargs")
    unknown = set(wrapper_kwargs) - set(env_args.wrappers)
    if unknown:
        raise ConfigError(f"wrapper_kwargs names wrappers not in wrappers: {sorted(unknown)}")
    wrappers = [(name, wrapper_kwargs[name]) if name in wrapper_kwargs else name for name in env_args.wrappers]
    dataset = make_prompt_dataset(env_args.env_ids, env_args.seeds, start_seed=env_args.start_seed)
    return GemGRPOTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=dataset,
        eval_dataset=_eval_dataset(env_args, training_args),
        reward_funcs=_reward_funcs(script_args.reward_funcs),
        wrappers=wrappers,
        system_prompt=env_args.system_prompt,
        env_kwargs=_mapping(env_args.env_kwargs, "env_kwargs"),
        quantization_config=get_quantization_config(model_args),
        peft_config=get_peft_config(model_args),
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``gem-trl`` and ``python -m gem_trl.cli``: parse, train, save."""
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is "experimental" in TRL 1.16
    trainer = build_trainer(*parse_args(argv))
    args = trainer.args
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    trainer.save_model(args.output_dir)
    trainer.accelerator.print(f"gem-trl: {trainer.state.global_step} steps; model saved to {args.output_dir}")
    if args.push_to_hub:
        trainer.push_to_hub()
        trainer.accelerator.print(f"gem-trl: model pushed to the Hub as {trainer.hub_model_id}")
    trainer.end()  # finishes the trackers (report_to) and destroys the process group, as `trl grpo` does


if __name__ == "__main__":
    main()
