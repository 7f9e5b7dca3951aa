"""``gem-trl``: TRL's YAML (parsed by TRL's parser) plus env keys; end to end with a tiny local model on the CPU."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from gem_trl import build_tiny_model
from gem_trl.cli import make_parser, parse_args
from trl import GRPOConfig, ModelConfig

from gem_core.errors import ConfigError, EnvNotFound
from gem_core.testing_tokenizers import build_chat_tokenizer

DOCS = Path(__file__).resolve().parents[3] / "docs" / "trl.md"
BIN = Path(sys.executable).parent


def test_every_grpo_config_and_model_config_field_is_a_key() -> None:
    dests = {action.dest for action in make_parser()._actions}
    for config in (GRPOConfig, ModelConfig):
        missing = [f.name for f in dataclasses.fields(config) if f.init and f.name not in dests]
        assert not missing, f"{config.__name__} fields gem-trl cannot take: {missing}"


def _write(tmp_path: Path, config: dict[str, Any]) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


TRL_KEYS: dict[str, Any] = {  # what a `trl grpo` YAML holds, less the dataset
    "model_name_or_path": "some/model",
    "dtype": "float32",
    "output_dir": "runs/x",
    "learning_rate": "1.0e-6",  # YAML reads this as a string; TRL's parser converts it
    "lr_scheduler_type": "cosine",
    "per_device_train_batch_size": 4,
    "num_generations": 2,
    "max_completion_length": 256,
    "beta": 0.0,
    "loss_type": "dr_grpo",
    "mask_truncated_completions": True,
    "model_init_kwargs": {"low_cpu_mem_usage": True},
    "use_cpu": True,
    "report_to": "none",
}


def test_a_trl_yaml_plus_env_keys_parses_with_trl_parser(tmp_path: Path) -> None:
    env_keys = {
        "env_ids": ["core:NumberGuess-v0"],
        "seeds": 16,
        "wrappers": ["tools"],
        "wrapper_kwargs": {"tools": {"tools": ["echo"]}},
        "env_kwargs": {"max_turns": 4},
        "gamma": 0.9,
        "max_turns": 4,
        "max_turn_tokens": 32,
        "on_cut": "truncate",
    }
    path = _write(tmp_path, {**TRL_KEYS, **env_keys, "env": {"GEM_TRL_TEST_VAR": "1"}})
    env_args, _, training_args, model_args = parse_args([path, "--num_generations", "4"])
    assert training_args.learning_rate == 1e-6 and training_args.lr_scheduler_type == "cosine"
    assert training_args.mask_truncated_completions and training_args.loss_type == "dr_grpo"
    assert training_args.num_generations == 4  # the command line overrides the file
    assert (training_args.gamma, training_args.max_turns, training_args.on_cut) == (0.9, 4, "truncate")
    assert model_args.model_name_or_path == "some/model"
    assert env_args.env_ids == ["core:NumberGuess-v0"] and env_args.seeds == 16
    assert env_args.wrapper_kwargs == {"tools": {"tools": ["echo"]}} and env_args.env_kwargs == {"max_turns": 4}
    assert os.environ.pop("GEM_TRL_TEST_VAR") == "1"  # TRL's env: block


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"dataset_name": "trl-lib/tldr"}, "replace dataset_name='trl-lib/tldr' by env_ids"),
        ({"env_ids": []}, "needs env_ids"),
        ({"no_such_key": 1}, r"Unknown arguments from config file: \['--no_such_key'"),
        ({"gamma": 2.0}, "gamma"),
        ({"on_cut": "drop"}, "on_cut"),
    ],
    ids=["dataset", "no-envs", "unknown-key", "bad-gamma", "bad-on-cut"],
)
def test_bad_config_gets_a_config_error(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    config = {**TRL_KEYS, "env_ids": ["core:NumberGuess-v0"], **change}
    with pytest.raises(ConfigError, match=message):
        parse_args([_write(tmp_path, config)])


def test_unknown_env_id_fails_before_loading_the_model(tmp_path: Path) -> None:
    from gem_trl.cli import build_trainer

    path = _write(tmp_path, {**TRL_KEYS, "env_ids": ["core:NumberGues-v0"], "output_dir": str(tmp_path)})
    with pytest.raises(EnvNotFound):
        build_trainer(*parse_args([path]))


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model and a history-rewriting tokenizer saved as a local checkpoint, as a user's model would be."""
    path = tmp_path_factory.mktemp("tiny-model")
    tokenizer = build_chat_tokenizer("chatml_drop_think")
    build_tiny_model(tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _run_config(tmp_path: Path, model_dir: Path) -> str:
    return _write(
        tmp_path,
        {
            "model_name_or_path": str(model_dir),
            "output_dir": str(tmp_path / "out"),
            "use_cpu": True,
            "bf16": False,
            "report_to": "none",
            "save_strategy": "no",
            "logging_steps": 1,
            "disable_tqdm": True,
            "max_steps": 2,
            "per_device_train_batch_size": 4,
            "num_generations": 2,
            "max_completion_length": 64,
            "learning_rate": "5.0e-3",
            "seed": 0,
            "env_ids": ["core:NumberGuess-v0"],
            "seeds": 8,
            "env_kwargs": {"max_turns": 3},
            "max_turns": 2,
            "max_turn_tokens": 6,
            "gamma": 0.9,
            # evaluation on start states after the training seeds, once, at the last step
            "eval_strategy": "steps",
            "eval_steps": 2,
            "eval_seeds": 2,
            "per_device_eval_batch_size": 4,
        },
    )


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["gem-trl", "accelerate"])
def test_command_trains_and_saves(tmp_path: Path, tiny_model_dir: Path, launcher: str) -> None:
    config = _run_config(tmp_path, tiny_model_dir)
    if launcher == "gem-trl":
        argv = [str(BIN / "gem-trl"), "--config", config]
    else:
        accelerate = shutil.which("accelerate", path=str(BIN))
        assert accelerate is not None
        argv = [accelerate, "launch", "--num_processes", "1", "--cpu", "-m", "gem_trl.cli", config]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "error"}
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900, check=False, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    output = result.stdout + result.stderr
    assert "gem-trl: 2 steps; model saved to" in output
    losses = [float(x) for x in re.findall(r"'loss': '?(-?[\d.e+-]+)", output)]
    assert len(losses) == 2, output[-3000:]
    eval_losses = re.findall(r"'eval_loss': '?(-?[\d.e+-]+)", output)
    assert len(eval_losses) == 1, output[-3000:]
    assert (tmp_path / "out" / "config.json").exists()


def test_the_yaml_in_the_docs_parses(tmp_path: Path) -> None:
    (block,) = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), flags=re.S)
    # bf16 off from the command line: TRL refuses bf16 on a machine without a GPU
    env_args, _, training_args, model_args = parse_args([_write(tmp_path, yaml.safe_load(block)), "--bf16", "false"])
    assert env_args.env_ids == ["game:GuessTheNumber-v0-easy"] and env_args.env_kwargs == {"max_turns": 8}
    assert training_args.use_vllm and training_args.max_turn_tokens == 256 and training_args.on_cut == "invalid"
    assert model_args.model_name_or_path == "Qwen/Qwen3-0.6B"
