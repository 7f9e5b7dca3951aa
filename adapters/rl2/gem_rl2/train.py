"""``gem-rl2-train``: RL2's PPO trainer (rl-square 0.0.2) with gem envs and ``adv.estimator=rebn``.

Run it where ``python -m RL2.trainer.ppo`` would run, with the same Hydra overrides::

    torchrun --nproc_per_node=4 -m gem_rl2.train train_data.path=data/train.parquet ... adv.estimator=rebn

Before RL2's ``main`` it

* replaces ``RL2.trainer.ppo.compute_advantages`` (imported by name into that module,
  so that is the binding the trainer calls) with one that also handles ``rebn``
  (:mod:`gem_rl2.advantages`);
* wraps ``RL2.workers.rollout.async_generate`` so the env module gets SGLang's finish
  reason with each reply (:mod:`gem_rl2.finish`: a cut is never read from the text);
* sets ``rollout.env_path`` to :mod:`gem_rl2.env` when it is not given;
* asks SGLang to keep special tokens in the generated text
  (``skip_special_tokens=false``) so the env module can tell a stopped generation
  from a cut one (see :mod:`gem_rl2.episodes`);
* exports :data:`gem_rl2.episodes.SETTINGS_ENV` for the env module: the tokenizer
  (``rollout.server_args.model_path``), ``rollout.max_turns``, ``gem.on_cut``
  (``+gem.on_cut=pass`` to override) and ``gem.on_env_error`` (``end`` by default: an
  env that raises ends only its episode, which trains nothing; ``+gem.on_env_error=raise``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gem_core.episode import EpisodeLimits
from gem_core.errors import ConfigError
from gem_core.rl.returns import check_gamma
from gem_rl2.advantages import ESTIMATOR, compute_advantages_with_rebn
from gem_rl2.episodes import SETTINGS_ENV, Settings
from gem_rl2.finish import install_finish_reasons

__all__ = ["ENV_PATH", "install_rebn", "install_step_guards", "main", "prepare"]

#: The env module's file, for ``rollout.env_path``.
ENV_PATH = str(Path(__file__).with_name("env.py"))
_ESTIMATORS = ("gae", "reinforce", ESTIMATOR)


def install_step_guards(actor_module: Any) -> None:
    """Make RL2's actor update (``RL2.workers.actor``) never divide its loss by a zero count; idempotent.

    An update whose episodes all ended by an env error has no action token left (gem zeroes
    their masks): RL2's ``count_total`` gives 0 actions and ``aggregate_values`` divides the
    (zero) loss sum by it, 0/0: NaN gradients, NaN weights. A zero count becomes 1 (its
    numerator is 0: an empty update).
    """
    original = actor_module.count_total
    if getattr(original, "gem_guard", False):
        return

    def count_total(minibatches: Any, key: Any, device_mesh: Any) -> Any:
        total = original(minibatches, key, device_mesh)
        if isinstance(total, tuple):
            return tuple(value or 1 for value in total)
        return total or 1

    count_total.gem_guard = True  # type: ignore[attr-defined]
    count_total.__wrapped__ = original  # type: ignore[attr-defined]
    actor_module.count_total = count_total


def install_rebn(ppo: Any) -> None:
    """Make ``ppo`` (the module ``RL2.trainer.ppo``) call a ``compute_advantages`` that knows ``rebn``; idempotent."""
    if not getattr(ppo.compute_advantages, "handles_rebn", False):
        ppo.compute_advantages = compute_advantages_with_rebn(ppo.compute_advantages)


def _given(overrides: Sequence[str]) -> set[str]:
    """The config keys a user's Hydra overrides set (``key=value``, ``+key=value``, ``++key=value``)."""
    return {item.lstrip("+~").split("=", 1)[0].strip() for item in overrides}


def prepare(config: Any, overrides: Sequence[str] = ()) -> Settings:
    """Check and complete RL2's composed config in place; return the env module's settings.

    Every check is a row of the options table in docs/rl2.md.

    Args:
        config: RL2's composed ``ppo`` config.
        overrides: The user's Hydra overrides (to tell a value given from RL2's default).

    Raises:
        ConfigError: An option that would make gem episodes train silently wrong, or fail later:
            an unknown ``adv.estimator``, ``gem.on_cut`` or ``gem.on_env_error``, ``rollout.max_turns``
            not given or ``< 1``, no model path, no ``actor.max_length_per_device``, ``stop`` strings,
            ``adv.gamma`` that ``reinforce`` would ignore, a KL coefficient without a KL type, ReBN with
            its normalisation or RL2's dynamic filtering turned off or on against it.
        gem_core.errors.RLInputError: ``adv.gamma`` outside ``[0, 1]`` with ``rebn``.
    """
    from omegaconf import OmegaConf, open_dict

    given = _given(overrides)
    estimator = config.adv.estimator
    if estimator not in _ESTIMATORS:
        raise ConfigError(f"adv.estimator={estimator!r}: RL2 with gem knows {', '.join(_ESTIMATORS)}")
    if estimator == ESTIMATOR:
        check_gamma(config.adv.gamma)
        for key in ("global_norm", "norm_var"):
            if f"adv.{key}" in given and not config.adv[key]:
                raise ConfigError(
                    f"adv.{key}=false: ReBN always normalises the turn returns over the whole batch by their mean "
                    f"and std; drop adv.{key} (or use adv.estimator=reinforce)"
                )
    elif estimator == "reinforce" and float(config.adv.gamma) != 1.0:
        raise ConfigError(
            f"adv.gamma={config.adv.gamma}: RL2's reinforce sums an episode's rewards and ignores gamma; use "
            "adv.estimator=rebn for a per-turn discount, or adv.gamma=1"
        )
    if "rollout.max_turns" not in given:
        raise ConfigError(
            "rollout.max_turns is not given: RL2's default of 1 ends every gem episode after its first turn; "
            "set rollout.max_turns=N (1 for single-turn envs)"
        )
    max_turns = config.rollout.max_turns
    if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1:
        raise ConfigError(f"rollout.max_turns must be an int >= 1, got {max_turns!r}")
    model_path = config.rollout.server_args.model_path
    if not model_path:
        raise ConfigError("no model: set actor.model_name=... (RL2's rollout.server_args.model_path follows it)")
    if not config.actor.max_length_per_device:
        raise ConfigError(
            "actor.max_length_per_device is not set: RL2's actor packs each update's sequences into minibatches "
            "of at most that many tokens; set it to at least the longest episode (prompt, every turn, every reply)"
        )
    if config.actor.avg_level != "token":
        raise ConfigError(
            f"actor.avg_level={config.actor.avg_level}: RL2 0.0.2's actor update fails with it (it averages its "
            "boolean clip flags per sequence, a TypeError in torch.finfo); use actor.avg_level=token"
        )
    if float(config.actor.kl.coef) > 0 and config.actor.kl.type not in ("reward", "loss"):
        raise ConfigError(
            f"actor.kl.coef={config.actor.kl.coef} with actor.kl.type={config.actor.kl.type}: RL2 then logs the KL "
            "and applies it nowhere; set actor.kl.type=loss (or reward), or actor.kl.coef=0"
        )
    for name in ("train_sampling_params", "test_sampling_params"):
        if config.rollout[name].get("stop"):
            raise ConfigError(
                f"rollout.{name}.stop={list(config.rollout[name].stop)}: leave it null with gem envs. A stop string "
                "is no token of the chat template, so the env module would take the reply as cut at max_new_tokens; "
                "the model's eos / end-of-turn token ends a reply"
            )
    filtering = config.rollout.responses_per_prompt > 1 and config.rollout.dynamic_filtering
    if filtering and "rollout.dynamic_filtering" in given and estimator == ESTIMATOR:
        raise ConfigError(
            "rollout.dynamic_filtering=true drops prompt groups whose summed episode rewards are equal, though their "
            "per-turn returns (what ReBN trains on) differ, and a step where every group is dropped crashes RL2; "
            "drop rollout.dynamic_filtering"
        )
    gem = config.get("gem")
    gem = OmegaConf.to_container(gem, resolve=True) if OmegaConf.is_config(gem) else ({} if gem is None else gem)
    if not isinstance(gem, dict):
        raise ConfigError(f"gem must be a mapping (+gem.on_cut=..., +gem.chat_template_kwargs=...), got {gem!r}")
    with open_dict(config):
        if not config.rollout.env_path:
            config.rollout.env_path = ENV_PATH
        for params in (config.rollout.train_sampling_params, config.rollout.test_sampling_params):
            params.skip_special_tokens = False
        if "rollout.dynamic_filtering" not in given:
            config.rollout.dynamic_filtering = False  # RL2's default (true) filters on summed episode rewards
        if estimator == ESTIMATOR:
            config.adv.global_norm = config.adv.norm_var = True  # what ReBN does, so the logged config says it
    settings = Settings(
        tokenizer=str(model_path),
        max_turns=int(max_turns),
        on_cut=gem.get("on_cut", "invalid"),
        chat_template_kwargs=dict(gem.get("chat_template_kwargs") or {}),
        on_env_error=gem.get("on_env_error", "end"),
    )
    # a bad on_cut / on_env_error fails here, not mid-rollout
    EpisodeLimits(max_turns=settings.max_turns, on_cut=settings.on_cut, on_env_error=settings.on_env_error)
    return settings


def main(argv: Sequence[str] | None = None) -> None:
    """Parse RL2's Hydra overrides (``sys.argv`` by default), prepare, and run RL2's PPO ``main``."""
    import hydra
    import RL2.trainer.ppo as ppo
    import RL2.workers.actor as actor_module
    import RL2.workers.rollout as rollout_module

    install_rebn(ppo)
    install_step_guards(actor_module)
    install_finish_reasons(rollout_module)
    config_dir = str(Path(ppo.__file__).with_name("config"))

    @hydra.main(config_path=config_dir, config_name="ppo", version_base=None)
    def run(config: Any) -> None:
        from hydra.core.hydra_config import HydraConfig

        settings = prepare(config, list(HydraConfig.get().overrides.task))
        os.environ[SETTINGS_ENV] = settings.to_json()
        # RL2's main minus its own Hydra wrapper: the config is composed already.
        ppo.main.__wrapped__(config)

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    run()


if __name__ == "__main__":
    main()
