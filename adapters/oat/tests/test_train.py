"""The launcher's command line: oat's own flags (tyro, default_args_validation) plus gem's."""

from __future__ import annotations

from typing import Any

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


def _table_options() -> list[str]:
    """The options of docs/oat.md's options table, in its order."""
    from pathlib import Path

    text = (Path(__file__).parents[3] / "docs" / "oat.md").read_text()
    table = text.split("<!-- options-table -->", 1)[1].split("<!-- /options-table -->", 1)[0]
    rows = [line for line in table.strip().splitlines()[2:] if line.startswith("|")]
    return [row.split("|")[1].strip().strip("`") for row in rows]


# Per row of the table: extra flags, then the error the launcher raises (a regex) or a check of the parsed args.
OPTION_CASES: dict[str, list[tuple[list[str], Any]]] = {
    "--num_samples": [
        ([], lambda a: a.num_samples == 1),
        (["--num_samples", "2"], "--num_samples 2.*use --num_samples 1"),
    ],
    "--pi_buffer_maxlen_per_device": [
        ([], lambda a: a.pi_buffer_maxlen_per_device == 128),  # 128 per round, one learner rank
        (
            ["--rollout_batch_size", "64", "--pi_buffer_maxlen_per_device", "64"],
            lambda a: a.pi_buffer_maxlen_per_device == 64,
        ),
        (["--pi_buffer_maxlen_per_device", "16"], "--pi_buffer_maxlen_per_device 16 keeps fewer.*>= 128"),
        (["--pi_buffer_maxlen_per_device", "-1"], "pi_buffer_maxlen_per_device must be >= 0"),
    ],
    "--buffer_clear_every": [
        ([], lambda a: a.buffer_clear_every == 1),
        (["--buffer_clear_every", "inf"], "--buffer_clear_every inf.*Use --buffer_clear_every 1"),
        (["--buffer_clear_every", "2"], "buffer_clear_every"),
    ],
    "--rollout_batch_size": [
        (["--rollout_batch_size", "24"], "--rollout_batch_size \\(24\\) must be a multiple"),
        (["--rollout_batch_size", "8"], "must be at least learner ranks"),
    ],
    "--rollout_batch_size_per_device": [
        (["--rollout_batch_size_per_device", "32"], lambda a: a.pi_buffer_maxlen_per_device == 128),
        (["--rollout_batch_size_per_device", "0"], "rollout_batch_size_per_device"),
    ],
    "--whiten_adv": [(["--whiten_adv"], "drop --whiten_adv")],
    "--critic_type": [
        (["--critic_type", "ppo"], "use drgrpo or grpo"),
        (["--critic_type", "grpo"], lambda a: a.critic_type == "grpo"),
    ],
    "--train_batch_size_per_device": [(["--train_batch_size_per_device", "2"], "train_batch_size_per_device 1")],
    "--num_gpus_per_actor": [(["--num_gpus_per_actor", "2"], "num_gpus_per_actor 1")],
    "--asynchronous": [(["--asynchronous"], "drop --asynchronous")],
    "--num_ppo_epochs": [(["--num_ppo_epochs", "3"], lambda a: a.num_ppo_epochs == 3)],
    "--gamma": [(["--gamma", "0.9"], lambda a: a.gamma == 0.9)],
    "--on_env_error": [
        ([], lambda a: a.on_env_error == "end"),
        (["--on_env_error", "skip"], "on_env_error must be end or raise"),
    ],
}


def test_the_options_table_and_the_cases_name_the_same_options() -> None:
    assert _table_options() == list(OPTION_CASES)


@pytest.mark.parametrize(
    ("extra", "expect"),
    [
        pytest.param(extra, expect, id=" ".join(extra) or f"{option} unset")
        for option, cases in OPTION_CASES.items()
        for extra, expect in cases
    ],
)
def test_every_option_in_the_table_is_set_or_refused_before_a_model_loads(extra: list[str], expect: Any) -> None:
    if isinstance(expect, str):
        with pytest.raises(ConfigError, match=expect):
            build_args([*BASE, *extra])
    else:
        assert expect(build_args([*BASE, *extra]))


def test_learner_ranks_follow_oats_gpu_split(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from gem_oat.args import learner_ranks

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    split = {
        (g, c): learner_ranks(SimpleNamespace(gpus=g, collocate=c, num_groups=1))
        for g in (1, 2, 3, 8)
        for c in (False, True)
    }
    assert split == {
        (1, False): 1,
        (2, False): 1,
        (3, False): 2,
        (8, False): 4,
        (1, True): 1,
        (2, True): 2,
        (3, True): 3,
        (8, True): 8,
    }
    # with 8 learner ranks a 128-transition round brings 16 per rank: oat's own default buffer then fits
    monkeypatch.setattr("torch.cuda.device_count", lambda: 8)
    assert build_args([*BASE[:-1], "8", "--collocate"]).pi_buffer_maxlen_per_device == 16
