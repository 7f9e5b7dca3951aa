"""Every row of the options table (``gem_verl.options.OPTIONS``, ``docs/verl.md``), through verl's own launcher.

``python -m verl.trainer.main_ppo`` composes verl's ``ppo_trainer`` config with the
user's overrides and calls ``validate_config`` before it starts Ray or loads any model
(``run_ppo``). The plugin wraps that ``validate_config``: a refused setting must stop
``main`` with a ``ConfigError`` naming the option and the fix, before ``run_ppo``; the
fix, or a supported setting, must reach ``run_ppo``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import verl  # noqa: F401  (the entry point installs the hook)
import verl.trainer.main_ppo as main_ppo
from gem_verl.options import EPISODE_METRICS, OPTIONS, Option, check_trainer_config, uses_gem
from hydra import compose, initialize_config_module

from gem_core.errors import ConfigError

DOCS = Path(__file__).resolve().parents[3] / "docs" / "verl.md"

#: What verl itself needs to pass its own checks (batch sizes).
VERL_BASE = [
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "critic.ppo_micro_batch_size_per_gpu=1",
    "critic.enable=false",  # else verl warns that it disabled the critic (tests turn warnings into errors)
]
#: A gem run: one gem override and gem's estimator.
BASE = ["+gem.max_turns=4", "algorithm.adv_estimator=rebn", *VERL_BASE]
TRANSITION = "+gem.layout=transition"
N4 = "actor_rollout_ref.rollout.n=4"
DAPO = "algorithm.filter_groups.enable=true"


def _metric(name: str) -> str:
    return f"algorithm.filter_groups.metric={name}"


#: Per row of OPTIONS: (overrides, the refusal's message or None when supported, the fix's overrides).
CASES: dict[Option, tuple[list[str], str | None, list[str]]] = {
    OPTIONS[0]: (["+gem.layuot=transition"], "(?s)bad `gem` section.*layuot", [TRANSITION]),
    OPTIONS[1]: (["trainer.use_v1=false"], "trainer.use_v1=false.*Set trainer.use_v1=true", []),
    OPTIONS[2]: (
        [TRANSITION, "algorithm.adv_estimator=grpo", N4],
        "algorithm.adv_estimator=grpo with \\+gem.layout=transition.*algorithm.adv_estimator=rebn",
        ["+gem.layout=sequence", "algorithm.adv_estimator=grpo", N4],
    ),
    OPTIONS[3]: (
        ["algorithm.adv_estimator=rloo", "actor_rollout_ref.rollout.n=1"],
        "actor_rollout_ref.rollout.n=1 with algorithm.adv_estimator=rloo.*n>=2",
        ["algorithm.adv_estimator=rloo", N4],
    ),
    OPTIONS[4]: (["algorithm.gamma=1.5"], "algorithm.gamma", ["algorithm.gamma=0.9"]),
    OPTIONS[5]: (
        [TRANSITION, "algorithm.use_kl_in_reward=true"],
        "algorithm.use_kl_in_reward=true with \\+gem.layout=transition.*use_kl_loss=true",
        [TRANSITION, "actor_rollout_ref.actor.use_kl_loss=true"],
    ),
    OPTIONS[6]: (["reward.reward_model.enable=true"], "reward.reward_model.enable=true.*=false", []),
    OPTIONS[7]: (
        [DAPO, _metric("success"), "actor_rollout_ref.rollout.n=1"],
        "filter_groups.enable=true with actor_rollout_ref.rollout.n=1.*n>=2",
        [DAPO, _metric("success"), N4],
    ),
    OPTIONS[8]: (
        [TRANSITION, DAPO, _metric("reward"), N4],
        "metric=reward with \\+gem.layout=transition.*metric=episode_return",
        [TRANSITION, DAPO, _metric("episode_return"), N4],
    ),
    OPTIONS[9]: (
        [DAPO, _metric("acc"), N4],
        "metric=acc.*Use one of: reward, episode_return",
        [DAPO, _metric("success"), N4],
    ),
    OPTIONS[10]: ([TRANSITION, DAPO, _metric("num_turns"), N4], None, []),
    OPTIONS[11]: (
        [
            "algorithm.rollout_correction.rollout_rs=token_k1",
            "algorithm.rollout_correction.rollout_rs_threshold=0.5_2.0",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
        ],
        None,
        [],
    ),
}


def launch(overrides: list[str], monkeypatch: pytest.MonkeyPatch, base: list[str] = BASE) -> bool:
    """Run verl's ``main_ppo.main`` on its composed config; whether it got as far as ``run_ppo`` (Ray, the models)."""
    reached: list[Any] = []
    monkeypatch.setattr(main_ppo, "run_ppo", lambda config, task_runner_class: reached.append(config))
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=[*base, *overrides])
    main_ppo.main.__wrapped__(cfg)
    return bool(reached)


def test_every_option_has_a_case() -> None:
    assert set(CASES) == set(OPTIONS)


@pytest.mark.parametrize(
    "option", OPTIONS, ids=[f"{o.key}:{re.sub(r'[^a-z0-9]+', '-', o.when.lower()).strip('-')[:40]}" for o in OPTIONS]
)
def test_the_launcher_checks_the_option_before_any_model_loads(option: Option, monkeypatch: pytest.MonkeyPatch) -> None:
    overrides, refusal, fix = CASES[option]
    if refusal is None:
        assert option.handling == "supported"
        assert launch(overrides, monkeypatch)
        return
    assert option.handling == "refused"
    with pytest.raises(ConfigError, match=refusal) as refused:
        launch(overrides, monkeypatch)
    assert option.key in str(refused.value)  # the message names the option
    assert launch(fix, monkeypatch)


def test_main_ppo_calls_the_checked_validate_config() -> None:
    assert main_ppo.validate_config.__gem_verl_hook__


def test_a_run_without_gem_is_left_to_verl(monkeypatch: pytest.MonkeyPatch) -> None:
    """No gem section, agent loop or estimator: gem's rules do not apply (grpo with n=1 is verl's business)."""
    plain = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=1"]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        assert not uses_gem(compose(config_name="ppo_trainer", overrides=[*VERL_BASE, *plain]))
    assert launch(plain, monkeypatch, base=VERL_BASE)


def test_the_agent_loop_config_is_checked_the_same_way() -> None:
    """Partial configs (another launcher, the loop's own check) are read with verl's defaults for what is missing."""
    with pytest.raises(ConfigError, match=r"filter_groups\.metric=acc"):
        check_trainer_config(
            {
                "algorithm": {"filter_groups": {"enable": True, "metric": "acc"}},
                "actor_rollout_ref": {"rollout": {"n": 2}},
            }
        )
    assert check_trainer_config({}).layout == "sequence"


def test_the_docs_table_lists_every_option_and_metric() -> None:
    text = DOCS.read_text()
    for option in OPTIONS:
        assert f"| `{option.key}` | {option.when} | {option.handling} | {option.why} |" in text, option
    for name, (meaning, _) in EPISODE_METRICS.items():
        assert f"| `{name}` | {meaning} |" in text, name
