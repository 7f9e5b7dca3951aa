"""gem-openrlhf-train: OpenRLHF's flags in, OpenRLHF's flags out, and every check before Ray starts."""

from __future__ import annotations

import json

import pytest
from gem_openrlhf import agent_func
from gem_openrlhf.dataset import make_rows, write_jsonl
from gem_openrlhf.executor import CONFIG_ENV
from gem_openrlhf.launcher import SETUP_HOOK, main, prepare
from gem_openrlhf.patch import ESTIMATOR_ENV

from gem_core.errors import ConfigError, EnvNotFound

BASE = ["--actor.model_name_or_path", "Qwen/Qwen3-1.7B", "--rollout.n_samples_per_prompt", "8"]


@pytest.mark.parametrize("form", ["space", "equals"])
def test_rebn_becomes_reinforce_plus_the_worker_hook(form: str) -> None:
    flag = ["--algo.advantage.estimator", "rebn"] if form == "space" else ["--algo.advantage.estimator=rebn"]
    plan = prepare([*BASE, *flag, "--algo.advantage.gamma", "0.9", "--algo.kl.use_loss"], environ={})
    assert plan.argv[: len(BASE)] == BASE
    assert plan.argv[len(BASE) : len(BASE) + 2] == ["--algo.advantage.estimator", "reinforce"]
    assert plan.argv[-2:] == ["--train.agent_func_path", agent_func.__file__]
    assert "--algo.advantage.gamma" in plan.argv and "0.9" in plan.argv
    assert plan.env_vars[ESTIMATOR_ENV] == "rebn"
    assert plan.runtime_env["worker_process_setup_hook"] == SETUP_HOOK
    assert plan.runtime_env["env_vars"] == plan.env_vars
    # OpenRLHF's own train() would have set these when starting Ray itself
    assert plan.env_vars["RAY_ENABLE_ZERO_COPY_TORCH_TENSORS"] == "1"


def test_openrlhfs_estimators_pass_through_untouched() -> None:
    plan = prepare([*BASE, "--algo.advantage.estimator", "group_norm"], environ={})
    assert plan.argv[:-2] == [*BASE, "--algo.advantage.estimator", "group_norm"]
    assert ESTIMATOR_ENV not in plan.env_vars


def test_an_explicit_agent_file_is_kept() -> None:
    plan = prepare([*BASE, "--train.agent_func_path", "/my/agent.py"], environ={})
    assert plan.argv.count("--train.agent_func_path") == 1 and "/my/agent.py" in plan.argv


def test_gem_config_is_exported_and_removed_from_openrlhfs_flags() -> None:
    settings = json.dumps({"max_turns": 4})
    plan = prepare([*BASE, "--gem.config", settings], environ={})
    assert "--gem.config" not in plan.argv and settings not in plan.argv
    assert plan.env_vars[CONFIG_ENV] == settings


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--algo.advantage.estimator", "rebn"], "--algo.kl.use_loss"),
        (["--algo.advantage.estimator", "rebn", "--algo.kl.init_coef", "0.05"], "--algo.kl.init_coef 0"),
        (["--data.apply_chat_template"], "drop --data.apply_chat_template"),
        (["--gem.config", '{"max_turns": 0}'], "max_turns"),
        (["--gem.config", "/nowhere.json"], "neither a JSON object nor a readable file"),
    ],
    ids=["rebn-kl-default", "rebn-kl-reward", "chat-template", "bad-setting", "missing-config"],
)
def test_misconfigurations_fail_before_ray(extra: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        prepare([*BASE, *extra], environ={})


def test_rebn_without_kl_is_fine() -> None:
    plan = prepare([*BASE, "--algo.advantage.estimator", "rebn", "--algo.kl.init_coef", "0"], environ={})
    assert plan.env_vars[ESTIMATOR_ENV] == "rebn"


def test_prompt_rows_are_checked_before_ray(tmp_path) -> None:
    good = write_jsonl(make_rows("core:NumberGuess-v0", range(5)), tmp_path / "train.jsonl")
    batches = ["--rollout.batch_size", "5", "--train.batch_size", "40"]
    plan = prepare([*BASE, *batches, "--data.prompt_dataset", good, "--eval.dataset", good], environ={})
    assert plan.rows == 10
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"input": json.dumps({"gem": {"env_id": "core:NumberGues-v0", "seed": 1}})}) + "\n")
    with pytest.raises(EnvNotFound, match="NumberGues-v0"):
        prepare([*BASE, "--data.prompt_dataset", str(bad)], environ={})
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"input": "What is 2+2?"}) + "\n")
    with pytest.raises(ConfigError, match=r"plain.jsonl:1: .*does not name a gem episode"):
        prepare([*BASE, "--data.prompt_dataset", str(plain)], environ={})


def test_main_reports_a_misconfiguration_without_a_traceback(capsys) -> None:
    assert main([*BASE, "--algo.advantage.estimator", "rebn"]) == 2
    assert "gem-openrlhf-train: " in capsys.readouterr().err


class _Parsed(Exception):
    """Raised where OpenRLHF's train() starts, carrying the args its CLI built."""


def documented_command() -> list[str]:
    """The flags of the ``gem-openrlhf-train`` command in docs/openrlhf.md."""
    import os
    import shlex

    docs = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "openrlhf.md")
    with open(docs, encoding="utf-8") as handle:
        text = handle.read()
    start = text.index("gem-openrlhf-train \\\n")
    block = text[start : text.index("```", start)]
    words = shlex.split(block.replace("\\\n", " "))
    assert words[0] == "gem-openrlhf-train"
    return words[1:]


@pytest.mark.slow
def test_the_documented_command_passes_openrlhfs_own_parser_and_checks(
    tmp_path, monkeypatch: pytest.MonkeyPatch, rebn_patched
) -> None:
    import os
    import sys

    import ray
    from harness import AGENT_FUNC_PATH  # noqa: F401  # stand-in GPU modules, before OpenRLHF's CLI imports

    train = write_jsonl(make_rows("core:NumberGuess-v0", range(64)), tmp_path / "train.jsonl")  # one step's prompts
    argv = documented_command()
    for flag in ("--data.prompt_dataset", "--eval.dataset"):
        argv[argv.index(flag) + 1] = train
    for key in (
        ESTIMATOR_ENV,
        CONFIG_ENV,
        "TOKENIZERS_PARALLELISM",
        "NCCL_DEBUG",
        "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS",
    ):
        monkeypatch.delenv(key, raising=False)  # main exports them; restored afterwards
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    calls = []

    def is_initialized() -> bool:
        calls.append(1)
        if len(calls) == 1:
            return True  # the launcher: Ray is up, do not start one
        raise _Parsed(sys._getframe(1).f_locals["args"])  # the first line of OpenRLHF's train(args)

    monkeypatch.setattr(ray, "is_initialized", is_initialized)
    with pytest.raises(_Parsed) as parsed:
        main(argv)
    args = parsed.value.args[0]
    assert args.algo.advantage.estimator == "reinforce" and args.algo.advantage.gamma == 0.9
    assert args.train.agent_func_path == agent_func.__file__
    assert args.reward.remote_url == ["agent"]  # OpenRLHF's own consequence of an agent file
    assert args.critic.model_name_or_path is None
    assert os.environ[ESTIMATOR_ENV] == "rebn" and json.loads(os.environ[CONFIG_ENV]) == {"max_turns": 16}
