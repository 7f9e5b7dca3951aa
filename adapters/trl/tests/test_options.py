"""Every row of docs/trl.md's table of trainer options, checked: supported, set, or refused before a model loads."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from gem_trl import GemRollout, build_tiny_tokenizer, cli, episode_key
from gem_trl.contract import (
    GRPO_TRAINER_ATTRIBUTES,
    GRPO_TRAINER_MODE_ATTRIBUTES,
    VLLM_COLOCATE_ATTRIBUTES,
    VLLM_GENERATION_ATTRIBUTES,
    TrlApiError,
    check_trl_api,
)
from gem_trl.rollout import _turn_sync
from gem_trl.testing import sleeping_colocate_engine, trainer_on
from trl.generation import vllm_generation

from gem_core.errors import ConfigError

DOCS = Path(__file__).resolve().parents[3] / "docs" / "trl.md"
ENV_ID = "core:NumberGuess-v0"
BASE: dict[str, Any] = {
    "model_name_or_path": "some/model",
    "output_dir": "runs/x",
    "use_cpu": True,
    "report_to": "none",
    "per_device_train_batch_size": 4,
    "num_generations": 2,
    "env_ids": [ENV_ID],
    "seeds": 8,
}


def parse(tmp_path: Path, **keys: Any) -> tuple[Any, ...]:
    """``gem-trl``'s parsing of a YAML: the checks that run before any model loads."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**BASE, **keys}))
    return cli.parse_args([str(path)])


def built_trainer(use_vllm: bool, mode: str = "colocate", drop: str | None = None) -> Any:
    """The attributes a GRPOTrainer built in one generation mode has (TRL 1.16), less ``drop``."""
    names = [*GRPO_TRAINER_ATTRIBUTES, *GRPO_TRAINER_MODE_ATTRIBUTES[use_vllm]]
    trainer = SimpleNamespace(**{name: None for name in names if name != drop})
    trainer.use_vllm, trainer._logs = use_vllm, {"advantages": []}
    if use_vllm:
        engine_names = VLLM_GENERATION_ATTRIBUTES + (VLLM_COLOCATE_ATTRIBUTES if mode == "colocate" else ())
        trainer.vllm_generation = SimpleNamespace(**{name: None for name in engine_names if name != drop})
        trainer.vllm_generation.mode = mode
    return trainer


def check_use_vllm(tmp_path: Path) -> None:
    for mode in ("colocate", "server"):
        check_trl_api(built_trainer(True, mode))  # no generation_config asked for with vLLM
    check_trl_api(built_trainer(False))
    with pytest.raises(TrlApiError, match="built with use_vllm=False has no attribute 'generation_config'"):
        check_trl_api(built_trainer(False, drop="generation_config"))
    with pytest.raises(TrlApiError, match="vllm_generation has no attribute '_llm_weights_sleeping'"):
        check_trl_api(built_trainer(True, drop="_llm_weights_sleeping"))
    _, _, training_args, _ = parse(tmp_path, use_vllm=True, vllm_mode="server")
    assert training_args.use_vllm and training_args.vllm_mode == "server"


def check_vllm_enable_sleep_mode(tmp_path: Path) -> None:
    _, _, training_args, _ = parse(tmp_path, use_vllm=True, vllm_mode="colocate", vllm_enable_sleep_mode=True)
    assert training_args.vllm_enable_sleep_mode
    tokenizer = build_tiny_tokenizer()
    engine = sleeping_colocate_engine(tokenizer)
    trainer = trainer_on(engine, tokenizer)
    out = GemRollout(max_turn_tokens=4, max_turns=3)([episode_key(ENV_ID, s) for s in range(2)], trainer)
    assert max(out["num_turns"]) == 3
    calls = engine.llm.calls
    assert (calls.count("wake_up(weights)"), calls.count("sleep(2)"), calls.count("generate")) == (1, 1, 3)


def _sharded(zero_stage: int = 0, fsdp: bool = False) -> Any:
    plugin = SimpleNamespace(zero_stage=zero_stage) if zero_stage else None
    accelerator = SimpleNamespace(num_processes=2, state=SimpleNamespace(deepspeed_plugin=plugin), device="cpu")
    return SimpleNamespace(use_vllm=False, accelerator=accelerator, is_fsdp_enabled=fsdp)


def check_deepspeed(tmp_path: Path) -> None:
    assert _turn_sync(_sharded(zero_stage=3)) is not None  # ranks agree on a batch size every turn
    assert _turn_sync(_sharded(zero_stage=2)) is None  # whole weights on every rank: generate is local
    assert _turn_sync(_sharded()) is None


def check_fsdp(tmp_path: Path) -> None:
    assert _turn_sync(_sharded(fsdp=True)) is not None


def check_eval_strategy(tmp_path: Path) -> None:
    env_args, _, training_args, _ = parse(tmp_path, eval_strategy="steps", eval_steps=1, eval_seeds=3)
    dataset = cli._eval_dataset(env_args, training_args)
    assert dataset["seed"] == [8, 9, 10]  # after the 8 training seeds
    env_args, _, training_args, _ = parse(tmp_path, eval_strategy="epoch", eval_seeds=2, eval_start_seed=100)
    assert cli._eval_dataset(env_args, training_args)["prompt"] == [episode_key(ENV_ID, 100), episode_key(ENV_ID, 101)]
    env_args, _, training_args, _ = parse(tmp_path)
    assert cli._eval_dataset(env_args, training_args) is None
    env_args, _, training_args, _ = parse(tmp_path, eval_strategy="steps", eval_seeds=0)
    with pytest.raises(ConfigError, match="eval_strategy='steps' needs eval episodes: set eval_seeds >= 1"):
        cli._eval_dataset(env_args, training_args)


class RecordingTrainer:
    """What ``gem-trl``'s main does with the trainer it built, in order."""

    def __init__(self, args: Any) -> None:
        self.args, self.calls = args, []
        self.state = SimpleNamespace(global_step=2)
        self.accelerator = SimpleNamespace(print=lambda *_: None)
        self.hub_model_id = "me/model"

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: self.calls.append(name)


def run_main(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **keys: Any) -> list[str]:
    built: list[RecordingTrainer] = []
    monkeypatch.setattr(cli, "build_trainer", lambda *parsed: built.append(RecordingTrainer(parsed[2])) or built[-1])
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**BASE, **keys}))
    cli.main([str(path)])
    return built[0].calls


def check_push_to_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_main(tmp_path, monkeypatch, push_to_hub=True) == ["train", "save_model", "push_to_hub", "end"]


def check_report_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_main(tmp_path, monkeypatch, report_to="none") == ["train", "save_model", "end"]


def check_loss_type(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"loss_type='vespo' .* advantage_estimator='grpo'"):
        parse(tmp_path, loss_type="vespo")
    assert parse(tmp_path, loss_type="vespo", advantage_estimator="grpo")[2].loss_type == "vespo"
    assert parse(tmp_path, loss_type="dr_grpo")[2].loss_type == "dr_grpo"


def check_off_policy_mask_threshold(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"off_policy_mask_threshold=0\.5 .* Remove off_policy_mask_threshold"):
        parse(tmp_path, off_policy_mask_threshold=0.5)
    assert parse(tmp_path, off_policy_mask_threshold=0.5, advantage_estimator="grpo")[2].off_policy_mask_threshold


def check_scale_rewards(tmp_path: Path) -> None:
    for value in ("none", "batch", False):
        with pytest.raises(ConfigError, match=rf"scale_rewards={value!r} has no effect with .*'rebn'"):
            parse(tmp_path, scale_rewards=value)
    assert parse(tmp_path, scale_rewards="group")[2].scale_rewards == "group"  # TRL's default: nothing to refuse
    assert parse(tmp_path, scale_rewards="none", advantage_estimator="grpo")[2].scale_rewards == "none"


def check_importance_sampling_level(tmp_path: Path) -> None:
    assert parse(tmp_path)[2].importance_sampling_level == "token"
    assert parse(tmp_path, importance_sampling_level="sequence")[2].importance_sampling_level == "sequence"


def check_num_generations(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"num_generations=1: .* per_device_train_batch_size=1 and steps_per_gen"):
        parse(tmp_path, num_generations=1, per_device_train_batch_size=1)
    odd = parse(tmp_path, num_generations=3, per_device_train_batch_size=3)[2]
    assert odd.generation_batch_size == 3
    one = parse(tmp_path, num_generations=2, per_device_train_batch_size=1, steps_per_generation=2)[2]
    assert (one.per_device_train_batch_size, one.generation_batch_size) == (1, 2)


def check_dataset_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="replace dataset_name='trl-lib/tldr' by env_ids"):
        parse(tmp_path, dataset_name="trl-lib/tldr")


def check_reward_model_name_or_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="remove reward_model_name_or_path"):
        parse(tmp_path, reward_model_name_or_path="some/rm")


CHECKS: dict[str, Callable[..., None]] = {
    "use_vllm": check_use_vllm,
    "vllm_enable_sleep_mode": check_vllm_enable_sleep_mode,
    "deepspeed": check_deepspeed,
    "fsdp": check_fsdp,
    "eval_strategy": check_eval_strategy,
    "push_to_hub": check_push_to_hub,
    "report_to": check_report_to,
    "loss_type": check_loss_type,
    "off_policy_mask_threshold": check_off_policy_mask_threshold,
    "scale_rewards": check_scale_rewards,
    "importance_sampling_level": check_importance_sampling_level,
    "num_generations": check_num_generations,
    "dataset_name": check_dataset_name,
    "reward_model_name_or_path": check_reward_model_name_or_path,
}


def docs_rows() -> list[str]:
    section = DOCS.read_text().split("### Trainer options that meet multi-turn episodes", 1)[1].split("\n#", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M)


def test_every_row_of_the_docs_table_has_a_check() -> None:
    assert docs_rows() == list(CHECKS)


@pytest.fixture
def _sampling_params(monkeypatch: pytest.MonkeyPatch) -> None:
    # vllm.SamplingParams, imported by TRL's module only when vLLM is installed
    if not hasattr(vllm_generation, "SamplingParams"):
        monkeypatch.setattr(vllm_generation, "SamplingParams", SimpleNamespace, raising=False)


@pytest.mark.usefixtures("_sampling_params")
@pytest.mark.parametrize("option", list(CHECKS))
def test_option(option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    check = CHECKS[option]
    if "monkeypatch" in check.__code__.co_varnames[: check.__code__.co_argcount]:
        check(tmp_path, monkeypatch)
    else:
        check(tmp_path)
