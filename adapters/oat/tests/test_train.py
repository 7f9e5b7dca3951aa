"""The launcher's command line: oat's own flags (tyro, default_args_validation) plus gem's."""

from __future__ import annotations

import pytest
from gem_oat.train import build_args

from gem_core.errors import ConfigError

BASE = ["--pretrain", "Qwen/Qwen3-1.7B-Base", "--gpus", "0"]


def test_oat_flags_and_env_flags_parse() -> None:
    args = build_args(
        [
            *BASE,
            "--env_ids",
            "core:NumberGuess-v0",
            "core:NumberGuess-v0-hard",
            "--gamma",
            "0.9",
            "--episodes_per_step",
            "8",
            "--max_turns",
            "6",
            "--env_wrappers",
            '[["tools", {"tools": ["echo"]}]]',
        ]
    )
    assert args.env_ids == ["core:NumberGuess-v0", "core:NumberGuess-v0-hard"]
    assert args.gamma == 0.9 and args.episodes_per_step == 8 and args.max_turns == 6
    assert args.whiten_adv is False
    assert args.oracle == "" and args.prompt_data == ""
    assert args.ref_pretrain == "Qwen/Qwen3-1.7B-Base"  # oat's default_args_validation ran


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--whiten_adv"], "whiten_adv"),
        (["--env_ids", "core:NoSuchEnv-v0"], "NoSuchEnv"),
        (["--env_kwargs", "[1]"], "env_kwargs must be a JSON object"),
        (["--env_wrappers", "{"], "env_wrappers must be a JSON list"),
        (["--on_cut", "skip"], "on_cut"),
        (["--on_env_error", "ignore"], "on_env_error"),
        (["--critic_type", "ppo"], "critic"),
        (["--episodes_per_step", "0"], "episodes_per_step"),
    ],
    ids=[
        "whiten-adv",
        "unknown-env",
        "bad-env-kwargs",
        "bad-wrappers",
        "bad-on-cut",
        "bad-on-env-error",
        "ppo-critic",
        "no-episodes",
    ],
)
def test_bad_flags_get_a_config_error_naming_them(extra: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_args([*BASE, *extra])


def test_the_documented_command_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    import shlex
    from pathlib import Path

    import torch

    text = (Path(__file__).parents[3] / "docs" / "oat.md").read_text()
    block = text.split("```bash\npython -m gem_oat.train", 1)[1].split("```", 1)[0]
    argv = shlex.split(block.replace("\\\n", " "))
    # oat's default_args_validation asserts the GPUs exist; the docs ask for 2.
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    args = build_args(argv)
    assert args.pretrain == "Qwen/Qwen3-1.7B-Base" and args.gpus == 2
    assert args.env_ids == ["core:NumberGuess-v0", "core:NumberGuess-v0-hard"]
    assert args.gradient_checkpointing is True and args.whiten_adv is False
