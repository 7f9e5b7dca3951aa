"""Every row of docs/rl2.md's options table: what ``gem-rl2-train`` does with that RL2 option.

Each row is set (completed in RL2's config), refused before RL2 starts with an error naming
the option and the fix, or supported. RL2's own Hydra config is composed with the overrides
a user would give; the table and this test name the same rows.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from gem_rl2 import train
from rl2_harness import rl2_config

from gem_core.errors import ConfigError, RLInputError

DOCS = Path(__file__).parents[3] / "docs" / "rl2.md"
BASE = ["actor.model_name=/models/tiny", "actor.max_length_per_device=4096", "rollout.max_turns=6"]
REBN = ["adv.estimator=rebn"]


def check_rebn_norm(config: Any, settings: Any) -> None:
    assert config.adv.global_norm and config.adv.norm_var


def check_gamma(config: Any, settings: Any) -> None:
    assert config.adv.gamma == 0.9


def check_filter_off(config: Any, settings: Any) -> None:
    assert config.rollout.dynamic_filtering is False


def check_filter_kept(config: Any, settings: Any) -> None:
    assert config.rollout.dynamic_filtering is True


def check_env_path(config: Any, settings: Any) -> None:
    assert config.rollout.env_path == train.ENV_PATH


def check_special_tokens(config: Any, settings: Any) -> None:
    params = (config.rollout.train_sampling_params, config.rollout.test_sampling_params)
    assert all(p.skip_special_tokens is False and p.no_stop_trim is True for p in params)


def check_turns(config: Any, settings: Any) -> None:
    assert settings.max_turns == 6


def check_kl_loss(config: Any, settings: Any) -> None:
    assert config.actor.kl.type == "loss"


def check_gem_options(config: Any, settings: Any) -> None:
    assert (settings.on_cut, settings.on_env_error) == ("pass", "raise")


def check_updates(config: Any, settings: Any) -> None:
    assert config.actor.update_per_rollout == 2


# (row id, overrides added to BASE, error message or a check of the prepared config and settings)
ROWS: list[tuple[str, list[str], Any]] = [
    ("estimator-unknown", ["adv.estimator=grpo"], "knows gae, reinforce, rebn"),
    ("rebn-gamma", [*REBN, "adv.gamma=0.9"], check_gamma),
    ("rebn-gamma-out-of-range", [*REBN, "adv.gamma=1.5"], "gamma"),
    ("rebn-norm-set", REBN, check_rebn_norm),
    ("rebn-norm-off-refused", [*REBN, "adv.norm_var=false"], "adv.norm_var=false"),
    ("reinforce-gamma-ignored", ["adv.estimator=reinforce", "adv.gamma=0.9"], "ignores gamma"),
    ("max-turns-default", ["~rollout.max_turns"], "rollout.max_turns is not given"),
    ("max-turns-given", [], check_turns),
    ("max-turns-below-one", ["rollout.max_turns=0"], "max_turns"),
    ("no-model", ["actor.model_name=null"], "actor.model_name"),
    ("max-length-per-device", ["actor.max_length_per_device=null"], "actor.max_length_per_device"),
    ("kl-without-type", ["actor.kl.coef=0.1"], "actor.kl.type=loss"),
    ("kl-as-loss", ["actor.kl.coef=0.1", "actor.kl.type=loss"], check_kl_loss),
    ("stop-strings", ["rollout.train_sampling_params.stop=[END]"], "stop"),
    ("skip-special-tokens", [], check_special_tokens),
    ("env-path", [], check_env_path),
    ("dynamic-filtering-default-off", [*REBN, "train_data.responses_per_prompt=4"], check_filter_off),
    (
        "dynamic-filtering-rebn-refused",
        [*REBN, "train_data.responses_per_prompt=4", "rollout.dynamic_filtering=true"],
        "drop rollout.dynamic_filtering",
    ),
    (
        "dynamic-filtering-reinforce-kept",
        ["adv.estimator=reinforce", "train_data.responses_per_prompt=4", "rollout.dynamic_filtering=true"],
        check_filter_kept,
    ),
    ("gem-options", ["+gem.on_cut=pass", "+gem.on_env_error=raise"], check_gem_options),
    ("gem-on-cut-unknown", ["+gem.on_cut=drop"], "on_cut"),
    ("gem-on-env-error-unknown", ["+gem.on_env_error=ignore"], "on_env_error"),
    ("gem-not-a-mapping", ["+gem=3"], "mapping"),
    ("avg-level-sequence", ["actor.avg_level=sequence"], "use actor.avg_level=token"),
    ("update-per-rollout", ["actor.update_per_rollout=2"], check_updates),
]


def documented_rows() -> set[str]:
    """The row ids in the last column of docs/rl2.md's options table."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Options checked before RL2 starts") :]
    section = section[: section.index("\n## ", 1)]
    return set(re.findall(r"^\|.*\| `([a-z0-9-]+)` \|\s*$", section, flags=re.MULTILINE))


def test_the_table_and_the_test_name_the_same_rows() -> None:
    assert documented_rows() == {row for row, _, _ in ROWS}


@pytest.mark.parametrize(("extra", "outcome"), [(e, o) for _, e, o in ROWS], ids=[r for r, _, _ in ROWS])
def test_each_option_is_set_refused_or_supported(extra: list[str], outcome: Any) -> None:
    removed = {item[1:].split("=")[0] for item in extra if item.startswith("~")}
    overrides = [o for o in BASE if o.split("=")[0] not in removed] + [o for o in extra if not o.startswith("~")]
    config = rl2_config(overrides)
    if isinstance(outcome, str):
        with pytest.raises((ConfigError, RLInputError), match=re.escape(outcome)):
            train.prepare(config, overrides)
        return
    outcome(config, train.prepare(config, overrides))
