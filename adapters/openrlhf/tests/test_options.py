"""Every row of docs/openrlhf.md's options table: what ``gem-openrlhf-train`` does with that OpenRLHF option.

Each row is set (rewritten for OpenRLHF), refused before Ray starts with an error naming the
option and the fix, or supported (OpenRLHF's own parser and checks accept the flags as given).
The table and this test name the same rows (``test_the_table_and_the_test_name_the_same_rows``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from gem_openrlhf import agent_func
from gem_openrlhf.dataset import make_rows, write_jsonl
from gem_openrlhf.executor import CONFIG_ENV
from gem_openrlhf.launcher import prepare
from gem_openrlhf.patch import ESTIMATOR_ENV
from ppo_step import openrlhf_args

from gem_core.errors import ConfigError, RLInputError

DOCS = Path(__file__).parents[3] / "docs" / "openrlhf.md"
# One CPU rank, a step of 4 samples trained as one optimizer step of 2 micro-batches.
BASE = [
    "--actor.model_name_or_path",
    "tiny",
    "--actor.num_gpus_per_node",
    "1",
    "--ref.num_gpus_per_node",
    "1",
    "--rollout.batch_size",
    "2",
    "--rollout.n_samples_per_prompt",
    "2",
    "--train.batch_size",
    "4",
    "--train.micro_batch_size",
    "2",
]
REBN = ["--algo.advantage.estimator", "rebn", "--algo.kl.use_loss"]


def check_set_rebn(plan: Any, args: Any) -> None:
    assert plan.env_vars[ESTIMATOR_ENV] == "rebn" and args.algo.advantage.estimator == "reinforce"


def check_set_agent(plan: Any, args: Any) -> None:
    assert args.train.agent_func_path == agent_func.__file__ and args.reward.remote_url == ["agent"]


def check_set_config(plan: Any, args: Any) -> None:
    assert json.loads(plan.env_vars[CONFIG_ENV]) == {"max_turns": 3} and "--gem.config" not in plan.argv


def check_gamma(plan: Any, args: Any) -> None:
    assert args.algo.advantage.gamma == 0.9  # kept: reinforce is the one estimator OpenRLHF keeps it for


def check_loss_agg(plan: Any, args: Any) -> None:
    assert args.actor.loss_agg_mode == "seq-mean-token-mean"


def check_gspo(plan: Any, args: Any) -> None:
    assert args.actor.policy_loss_type == "gspo"


def check_one_sample(plan: Any, args: Any) -> None:
    assert args.rollout.n_samples_per_prompt == 1


def check_prompts(plan: Any, args: Any) -> None:
    assert plan.rows == 4


# (row id, extra flags, ConfigError/RLInputError message or a check of the launch plan and OpenRLHF's args)
ROWS: list[tuple[str, list[str], Any]] = [
    ("rebn-estimator", REBN, check_set_rebn),
    ("rebn-kl-in-reward", ["--algo.advantage.estimator", "rebn"], "--algo.kl.use_loss"),
    ("rebn-gamma", [*REBN, "--algo.advantage.gamma", "0.9"], check_gamma),
    ("rebn-gamma-out-of-range", [*REBN, "--algo.advantage.gamma", "1.5"], "gamma"),
    ("rebn-no-std-norm", [*REBN, "--algo.advantage.no_std_norm"], "drop --algo.advantage.no_std_norm"),
    ("rebn-overlong-penalty", [*REBN, "--reward.overlong_buffer_len", "64"], "drop --reward.overlong_buffer_len"),
    (
        "rebn-stop-penalty",
        [*REBN, "--reward.stop_properly_penalty_coef", "0.5"],
        "drop --reward.stop_properly_penalty_coef",
    ),
    ("rebn-reward-clip", [*REBN, "--reward.clip_range", "-1", "1"], "drop --reward.clip_range"),
    (
        "rebn-one-sample-per-prompt",
        [*REBN, "--rollout.n_samples_per_prompt", "1", "--rollout.batch_size", "4"],
        check_one_sample,
    ),
    ("is-correction-seq", ["--algo.advantage.is_correction_level", "seq"], "is_correction_level token"),
    ("chat-template", ["--data.apply_chat_template"], "drop --data.apply_chat_template"),
    ("input-template", ["--data.input_template", "Q: {}"], "drop --data.apply_chat_template and --data.input_template"),
    ("agent-file", [], check_set_agent),
    ("gem-config", ["--gem.config", '{"max_turns": 3}'], check_set_config),
    ("step-not-whole", ["--train.batch_size", "3", "--train.micro_batch_size", "1"], "whole number of optimizer steps"),
    ("micro-batch-not-dividing", ["--train.micro_batch_size", "3"], "not a multiple of --train.micro_batch_size"),
    ("prompt-file-short-last-step", ["--data.prompt_dataset", "{rows5}"], "--data.max_samples 4"),
    ("prompt-file-whole-steps", ["--data.prompt_dataset", "{rows4}"], check_prompts),
    ("dynamic-batch", ["--train.dynamic_batch_enable"], "drop --train.dynamic_batch_enable"),
    ("dynamic-filtering", ["--algo.dynamic_filtering_enable"], "drop --algo.dynamic_filtering_enable"),
    ("loss-agg-seq-mean", ["--actor.loss_agg_mode", "seq-mean-token-mean"], check_loss_agg),
    ("gspo", ["--actor.policy_loss_type", "gspo"], check_gspo),
]


def documented_rows() -> set[str]:
    """The row ids in the last column of docs/openrlhf.md's options table."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Options checked before Ray starts") :]
    section = section[: section.index("\n## ", 1)]
    return set(re.findall(r"^\|.*\| `([a-z0-9-]+)` \|\s*$", section, flags=re.MULTILINE))


def test_the_table_and_the_test_name_the_same_rows() -> None:
    assert documented_rows() == {row for row, _, _ in ROWS}


@pytest.mark.parametrize(("extra", "outcome"), [(e, o) for _, e, o in ROWS], ids=[r for r, _, _ in ROWS])
def test_each_option_is_set_refused_or_supported(extra: list[str], outcome: Any, tmp_path: Path) -> None:
    files = {
        f"{{rows{n}}}": write_jsonl(make_rows("core:NumberGuess-v0", range(n)), tmp_path / f"rows{n}.jsonl")
        for n in (4, 5)
    }
    argv = [*BASE, *(files.get(word, word) for word in extra)]
    if isinstance(outcome, str):
        with pytest.raises((ConfigError, RLInputError), match=re.escape(outcome)):
            prepare(argv, environ={})
        return
    outcome(prepare(argv, environ={}), openrlhf_args(argv))  # and OpenRLHF's own parser and checks accept it
